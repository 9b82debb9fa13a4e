"""`finish_and_lease`: a worker ends its tasks and takes the next ones in one call (on
PostgreSQL, one statement and one commit), with the fences and History of each half."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from scylla_django.enums import EventType, Status
from scylla_django.exceptions import exception_error
from scylla_django.models import History, Outcome, QueueSetting, Task, Worker
from scylla_django.retries import Fixed, Retry

pytestmark = pytest.mark.django_db(transaction=True)


def outcome(held: Task, **kwargs) -> Outcome:
    return Outcome(held.pk, held.leases, **kwargs)


def events(task: Task) -> list[str]:
    return list(History.objects.filter(task=task).order_by("pk").values_list("typ", flat=True))


def test_it_finishes_the_outcome_and_leases_the_next_task(worker):
    first, second = (Task.objects.submit("default", {"n": n}) for n in range(2))
    [held] = Task.objects.lease(worker, ["default"])
    assert held.pk == first.pk

    finished, leased = Task.objects.finish_and_lease(
        worker, [outcome(held, result={"ok": 1})], ["default"], limit=2
    )

    assert finished == {first.pk}
    assert [t.pk for t in leased] == [second.pk]
    assert (leased[0].status, leased[0].owner, leased[0].leases) == ("running", worker.name, 1)
    first.refresh_from_db()
    assert (first.status, first.result, first.progress) == ("completed", {"ok": 1}, 1.0)
    assert events(first) == [EventType.ASSIGNMENT, EventType.COMPLETION]
    assert events(second) == [EventType.ASSIGNMENT]


def test_a_refused_outcome_is_not_written_and_the_lease_still_happens(worker):
    first, second = (Task.objects.submit("default", {"n": n}) for n in range(2))
    [held] = Task.objects.lease(worker, ["default"])
    Task.objects.get(pk=held.pk).cancel()

    finished, leased = Task.objects.finish_and_lease(worker, [outcome(held)], ["default"])

    assert finished == set() and [t.pk for t in leased] == [second.pk]
    assert Task.objects.get(pk=first.pk).status == Status.CANCELLED
    refused = Task.objects.refusals(worker, {held.pk: held.leases})
    assert refused[held.pk].code == "task_cancelled"


def test_a_stale_lease_is_refused(worker):
    task = Task.objects.submit("default", {})
    [held] = Task.objects.lease(worker, ["default"])
    finished, leased = Task.objects.finish_and_lease(
        worker, [Outcome(held.pk, held.leases + 1)], ["default"]
    )
    assert (finished, leased) == (set(), [])
    assert Task.objects.get(pk=task.pk).status == Status.RUNNING


def test_a_stopped_worker_finishes_its_outcome_and_leases_nothing(worker):
    Task.objects.submit("default", {"n": 1})
    [held] = Task.objects.lease(worker, ["default"])
    Task.objects.submit("default", {"n": 2})
    Worker.objects.get(pk=worker.pk).stop()

    finished, leased = Task.objects.finish_and_lease(worker, [outcome(held)], ["default"])

    assert (finished, leased) == ({held.pk}, [])
    assert Task.objects.filter(status=Status.READY).count() == 1


def test_a_limited_queue_leases_only_the_room_the_finished_task_left(worker, other_worker):
    QueueSetting.objects.limit("default", 2)
    for n in range(4):
        Task.objects.submit("default", {"n": n})
    [mine] = Task.objects.lease(worker, ["default"])
    [theirs] = Task.objects.lease(other_worker, ["default"])

    finished, leased = Task.objects.finish_and_lease(worker, [outcome(mine)], ["default"], limit=3)

    assert finished == {mine.pk} and len(leased) == 1  # the limit counts theirs
    assert Task.objects.filter(status=Status.RUNNING).count() == 2
    assert theirs.pk not in {t.pk for t in leased}


def test_an_abort_with_a_retry_policy_is_followed_by_its_next_attempt(worker):
    task = Task.objects.submit("default", {}, retry=Retry(backoff=Fixed(0)))
    [held] = Task.objects.lease(worker, ["default"])
    errors = [exception_error(ValueError())]

    finished, leased = Task.objects.finish_and_lease(
        worker, [outcome(held, errors=errors)], ["default"]
    )

    assert finished == {task.pk}
    assert Task.objects.get(pk=task.pk).status == Status.ABORTED
    [retry] = leased  # the next attempt, ready at once, leased by the same call
    assert (retry.retry_of, retry.attempt, retry.root) == (task.rn, 2, task.rn)


@pytest.mark.postgres
def test_on_postgresql_it_is_one_statement_in_autocommit(worker):
    """As a worker calls it: its outcomes carry their tasks and run times (so that no signal
    receiver reads them back)."""
    for n in range(2):
        Task.objects.submit("default", {"n": n})
    [held] = Task.objects.lease(worker, ["default"])
    connection.ensure_connection()
    ended = outcome(held, task=held, duration=0.01)
    with CaptureQueriesContext(connection) as queries:
        finished, leased = Task.objects.finish_and_lease(worker, [ended], ["default"])
    assert finished == {held.pk} and len(leased) == 1
    [statement] = [q["sql"] for q in queries.captured_queries]
    assert "jsonb_to_recordset" in statement and "SKIP LOCKED" in statement
    assert not connection.in_atomic_block
    assert Task.objects.get(pk=held.pk).status == Status.COMPLETED


@pytest.mark.postgres
def test_no_snapshot_sees_the_worker_hold_the_finished_task_and_the_next_one(worker):
    """A worker of concurrency 1 ends each task and takes the next; another session counts
    the worker's running tasks all the while, and never sees two."""
    Task.objects.submit_many({"queue": "default", "spec": {"n": n}} for n in range(300))
    [held] = Task.objects.lease(worker, ["default"])
    done = threading.Event()
    seen: list[int] = []

    def watch() -> None:
        try:
            while not done.is_set():
                seen.append(Task.objects.filter(owner=worker.name, status="running").count())
        finally:
            connections.close_all()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        while held is not None:
            _, leased = Task.objects.finish_and_lease(worker, [outcome(held)], ["default"])
            held = leased[0] if leased else None
    finally:
        done.set()
        watcher.join()
    assert Task.objects.filter(status=Status.COMPLETED).count() == 300
    assert len(seen) > 50 and max(seen) == 1, (len(seen), max(seen))
