"""Batches: counters moved by each finish, callbacks released (or cancelled) exactly once,
a whole batch cancelled, bad callbacks refused with nothing written."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from scylla_django import Fixed, Retry
from scylla_django.batches import (
    Batch,
    CallbackPass,
    batch_of,
    cancel_batch,
    release_callbacks,
)
from scylla_django.enums import Status
from scylla_django.exceptions import InvalidTransition, exception_error
from scylla_django.models import AFTER_PARENTS, Outcome, Task, Worker
from scylla_django.models import Batch as BatchRow
from scylla_django.models.serving import forget_live_worker_queues
from scylla_django.monitor import Monitor
from tests.helpers import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = ["work", "done", "failed", "ended"]


@pytest.fixture
def crew(db) -> Worker:
    """A live worker serving the batch's queue and the callbacks' queues."""
    forget_live_worker_queues()
    worker = Worker.objects.register(queues=QUEUES, capacity=4, hostname="test", pid=1)
    yield worker
    forget_live_worker_queues()


def callbacks() -> dict[str, tuple[str, dict[str, str]]]:
    return {
        "on_success": ("done", {"say": "success"}),
        "on_complete": ("ended", {"say": "complete"}),
        "on_failure": ("failed", {"say": "failure"}),
    }


def run_all(
    worker: Worker, queue: str = "work", fail: set[str] = frozenset(), rounds: int = 10**6
) -> int:
    """Lease and finish every ready task of `queue` in bulk (in at most `rounds` leases);
    abort those whose rn is in `fail`. Returns how many were finished."""
    finished = 0
    for _ in range(rounds):
        leased = Task.objects.lease(worker, [queue], limit=1000)
        if not leased:
            break
        outcomes = [
            Outcome(
                task.pk,
                task.leases,
                result={"rn": task.rn},
                errors=[exception_error(ValueError("no"))] if task.rn in fail else None,
            )
            for task in leased
        ]
        finished += len(Task.objects.finish_many(worker, outcomes))
    return finished


def states(row: BatchRow) -> dict[str, tuple[str, bool]]:
    """Each callback's status, and whether it is still held."""
    tasks = Task.objects.in_bulk(list(row.callbacks().values()))
    return {
        kind: (tasks[pk].status, tasks[pk].not_before == AFTER_PARENTS)
        for kind, pk in row.callbacks().items()
    }


def test_a_batch_that_completes_releases_on_success_and_on_complete_once(crew):
    with Batch(**callbacks()) as batch:
        for n in range(5):
            batch.submit("work", {"n": n})
    row = batch.row
    assert row is not None
    row.refresh_from_db()
    assert (row.total, row.completed, row.failed) == (5, 0, 0)
    assert release_callbacks() == CallbackPass(0, 0)
    assert all(held for _, held in states(row).values())

    assert run_all(crew) == 5
    row.refresh_from_db()
    assert (row.total, row.completed, row.failed, row.state) == (5, 5, 0, "completed")
    assert release_callbacks() == CallbackPass(released=2, cancelled=1)
    assert release_callbacks() == CallbackPass(0, 0)
    assert states(row) == {
        "on_success": (Status.READY, False),
        "on_complete": (Status.READY, False),
        "on_failure": (Status.CANCELLED, False),
    }
    failure = Task.objects.get(pk=row.on_failure_id)
    assert failure.errors[0]["code"] == "batch_succeeded"
    row.refresh_from_db()
    assert row.closed is not None
    [callback] = Task.objects.lease(crew, ["done"])
    assert callback.spec == {"say": "success"}
    # A callback reads the batch's results in pages.
    found = batch_of(callback)
    assert found is not None and found.pk == row.pk
    first = found.results(limit=3)
    rest = found.results(after=first[-1][0], limit=3)
    assert [rn for _, rn, _ in first + rest] == list(
        Task.objects.filter(batch=row).order_by("pk").values_list("rn", flat=True)
    )
    assert all(result == {"rn": rn} for _, rn, result in first + rest)


def test_a_failure_for_good_releases_on_failure_at_once_and_cancels_on_success(crew):
    with Batch(**callbacks()) as batch:
        tasks = [batch.submit("work", {"n": n}) for n in range(3)]
    row = batch.row
    assert row is not None
    [first] = Task.objects.filter(pk=tasks[0].pk).lease(crew, ["work"])
    first.abort(crew, [exception_error(ValueError("no"))])
    first.refresh_from_db()
    assert first.dead is not None
    assert release_callbacks() == CallbackPass(released=1, cancelled=0)
    assert states(row)["on_failure"] == (Status.READY, False)
    assert states(row)["on_success"] == (Status.READY, True)
    assert run_all(crew) == 2
    assert release_callbacks() == CallbackPass(released=1, cancelled=1)
    success = Task.objects.get(pk=row.on_success_id)
    assert (success.status, success.errors[0]["code"]) == (Status.CANCELLED, "batch_failed")
    row.refresh_from_db()
    assert (row.completed, row.failed, row.state) == (2, 1, "failed")


def test_an_abort_that_is_retried_is_no_failure_until_its_retries_run_out(crew):
    with Batch(on_failure=("failed", {}), on_complete=("ended", {})) as batch:
        task = batch.submit("work", {}, retry=Retry(max_attempts=2, backoff=Fixed(0)))
    row = batch.row
    assert row is not None
    assert run_all(crew, fail={task.rn}, rounds=1) == 1
    row.refresh_from_db()
    assert (row.completed, row.failed) == (0, 0)
    retry = Task.objects.get(retry_of=task.rn)
    assert retry.batch_id == row.pk
    assert release_callbacks() == CallbackPass(0, 0)
    assert run_all(crew, fail={retry.rn}) == 1
    row.refresh_from_db()
    assert (row.total, row.completed, row.failed) == (1, 0, 1)
    assert release_callbacks() == CallbackPass(released=2, cancelled=0)


def test_requeueing_a_dead_task_of_a_batch_puts_its_retry_in_its_place(crew):
    with Batch(on_success=("done", {})) as batch:
        task = batch.submit("work", {})
    row = batch.row
    assert row is not None
    run_all(crew, fail={task.rn})
    row.refresh_from_db()
    assert row.failed == 1
    retry = Task.objects.get(pk=task.pk).retry()
    row.refresh_from_db()
    assert (row.failed, retry.batch_id) == (0, row.pk)
    assert Task.objects.get(pk=task.pk).dead is None
    run_all(crew)
    assert release_callbacks() == CallbackPass(released=1, cancelled=0)


def test_an_empty_batch_is_finished_at_once(crew):
    with Batch(on_success=("done", {})) as batch:
        pass
    assert batch.row is not None and batch.row.total == 0
    assert release_callbacks() == CallbackPass(released=1, cancelled=0)


def test_an_error_in_the_block_writes_nothing(crew):
    with pytest.raises(RuntimeError), Batch(on_success=("done", {})) as batch:
        batch.submit("work", {})
        raise RuntimeError("changed my mind")
    assert not BatchRow.objects.exists()
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("given", "code"),
    [
        (("nobody-serves-this", {}), "unknown_queue"),
        ("done", "invalid_callback"),
        (("done",), "invalid_callback"),
        (("done", {}, {"after": ["x"]}), "invalid_callback"),
        (("bad queue!", {}), "invalid_callback"),
        ({"queue": "done", "spec": {}, "priority": 999}, "invalid_callback"),
    ],
)
def test_a_bad_callback_is_refused_before_anything_is_written(crew, given, code):
    with pytest.raises(ValidationError) as caught:
        Batch(on_success=given)
    assert [e.code for e in caught.value.error_dict["on_success"]] == [code]
    assert not BatchRow.objects.exists()
    assert not Task.objects.exists()


def test_cancelling_a_batch_cancels_its_tasks_and_its_callbacks(crew):
    with Batch(**callbacks()) as batch:
        for n in range(4):
            batch.submit("work", {"n": n})
    row = batch.row
    assert row is not None
    [running] = Task.objects.lease(crew, ["work"])
    running.complete(crew)
    assert cancel_batch(row) == 3
    assert (row.completed, row.failed, row.state) == (1, 3, "cancelled")
    assert row.closed is not None
    assert {status for status, _ in states(row).values()} == {Status.CANCELLED}
    codes = Task.objects.filter(pk__in=row.callbacks().values()).values_list("errors", flat=True)
    assert {errors[0]["code"] for errors in codes} == {"batch_cancelled"}
    assert release_callbacks() == CallbackPass(0, 0)
    with pytest.raises(InvalidTransition):
        cancel_batch(row)


def test_callbacks_fire_once_under_three_monitors_and_concurrent_finishes(crew):
    """10,000 tasks (2,000 on SQLite, whose one writer at a time makes the threads take turns)
    finished by three threads at once while three monitors pass: each callback is released
    exactly once and the counters add up."""
    total = 10_000 if connection.vendor == "postgresql" else 2_000
    with Batch(on_success=("done", {}), on_complete=("ended", {})) as batch:
        outcomes = batch.submit_many([{"queue": "work", "spec": {"n": n}} for n in range(total)])
    assert {o.outcome for o in outcomes} == {"inserted"}
    row = batch.row
    assert row is not None
    workers = [crew] + [
        Worker.objects.register(queues=["work"], capacity=4, hostname="test", pid=n) for n in (2, 3)
    ]
    monitors = [Monitor(interval=0.05) for _ in range(3)]

    done = threading.Event()

    def finisher_then_signal(worker: Worker):
        def job(barrier):
            try:
                return run_all(worker)
            finally:
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        done.set()
                barrier.wait()

        return job

    lock, left = threading.Lock(), [len(workers)]

    def watcher(m: Monitor):
        def job(barrier):
            released = 0
            while not done.wait(0.05):
                released += m.run_once([m.callbacks]).callbacks_released
            barrier.wait()
            for _ in range(3):
                released += m.run_once([m.callbacks]).callbacks_released
            return released

        return job

    results = run_in_threads(
        [finisher_then_signal(w) for w in workers] + [watcher(m) for m in monitors]
    )
    assert sum(results[:3]) == total
    released = sum(results[3:])
    row.refresh_from_db()
    assert (row.total, row.completed, row.failed) == (total, total, 0)
    assert released == 2
    assert release_callbacks() == CallbackPass(0, 0)
    assert states(row) == {
        "on_success": (Status.READY, False),
        "on_complete": (Status.READY, False),
    }
