"""Leases belong to registered workers, are fenced on owner and lease number, keep their length, and
their History times follow causal order."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scylla_django.enums import EventType, Status
from scylla_django.exceptions import LeaseLost, WorkerNotFound
from scylla_django.models import History, Task, Worker
from tests.factories import TaskFactory, running_task
from tests.helpers import expire
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


# -- fenced on the lease (owner and lease number) -------------------------------------------------


def test_a_late_call_from_an_earlier_lease_of_the_same_worker_is_lease_lost(worker):
    first = running_task(worker, lease_length=30)
    expire(first)
    assert Task.objects.reset_expired() == 1
    [second] = Task.objects.lease(worker, ["default"], lease_length=30)
    assert second.pk == first.pk and (first.leases, second.leases) == (1, 2)

    calls = {
        "heartbeat": lambda task: task.heartbeat(worker, progress=0.5),
        "yield": lambda task: task.yield_lease(worker),
        "abort": lambda task: task.abort(worker, {"code": "late"}),
        "complete": lambda task: task.complete(worker, result="late"),
    }
    for name, call in calls.items():
        with pytest.raises(LeaseLost, match="lease 1"):
            call(first)
        stored = Task.objects.get(pk=first.pk)
        assert (stored.status, stored.progress, stored.result) == (Status.RUNNING, 0.0, None), name
    second.heartbeat(worker, progress=0.25)
    second.complete(worker, result="fresh")
    assert Task.objects.get(pk=first.pk).result == "fresh"
    typs = list(History.objects.filter(task=first).values_list("typ", flat=True))
    assert typs == [
        EventType.ASSIGNMENT,
        EventType.TIMEOUT,
        EventType.ASSIGNMENT,
        EventType.COMPLETION,
    ]


# -- a heartbeat keeps the lease's own length ---------------------------------------------------


def test_a_heartbeat_without_a_lease_length_extends_by_the_leases_own_length(worker, settings):
    settings.SCYLLA = {"LEASE_LENGTH": 10}
    task = running_task(worker, lease_length=600)
    assert task.lease_length == timedelta(seconds=600)
    task.heartbeat(worker, progress=0.1)
    stored = Task.objects.get(pk=task.pk)
    assert stored.deadline - stored.updated == timedelta(seconds=600)
    task.heartbeat(worker, lease_length=120)  # an explicit lease length still wins, for this beat
    stored = Task.objects.get(pk=task.pk)
    assert stored.deadline - stored.updated == timedelta(seconds=120)


def test_a_lease_without_a_lease_length_keeps_the_setting_as_its_length(worker, settings):
    settings.SCYLLA = {"LEASE_LENGTH": 45}
    TaskFactory()
    [task] = Task.objects.lease(worker, ["default"])
    assert task.lease_length == timedelta(seconds=45)
    task.heartbeat(worker)
    stored = Task.objects.get(pk=task.pk)
    assert stored.deadline - stored.updated == timedelta(seconds=45)


# -- only registered, running workers lease -----------------------------------------------------


@pytest.mark.parametrize("name", ["bob", "worker-999999", "worker-", ""])
def test_only_a_registered_worker_may_lease(name):
    task = TaskFactory()
    with pytest.raises(WorkerNotFound):
        Task.objects.lease(name, ["default"])
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.owner, stored.leases) == (Status.READY, None, 0)
    assert not History.objects.filter(task=task).exists()


def test_a_stopped_worker_may_not_lease(worker):
    task = TaskFactory()
    worker.stop()
    with pytest.raises(WorkerNotFound, match="running worker"):
        Task.objects.lease(worker, ["default"])
    assert Task.objects.get(pk=task.pk).status == Status.READY


@pytest.mark.postgres
def test_the_worker_check_is_part_of_the_lease_statement(worker):
    TaskFactory()
    with CaptureQueriesContext(connection) as captured:
        [task] = Task.objects.lease(worker, ["default"])
        assert Task.objects.lease(worker, ["default"]) == []
    assert len(captured.captured_queries) == 2  # one statement per lease, found or not
    assert task.owner == worker.name


# -- History time order is causal order ---------------------------------------------------------


@pytest.mark.postgres
def test_an_assignment_is_never_stamped_before_the_timeout_that_freed_the_task():
    """A lease that arrives while a reset is under way is stamped after the reset's TaskTimeout.

    The monitor's transaction holds the History table, so the lease statement (which writes
    History) arrives, then waits; the reset runs after the lease arrived and commits; the lease
    then sees the task ready and takes it. The TaskAssignment must not carry the time the lease
    statement arrived, which is before the TaskTimeout.
    """
    first = Worker.objects.register(queues=["causal"])
    second = Worker.objects.register(queues=["causal"])
    task = running_task(first, queue="causal")
    expire(task)
    held, lease_sent = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def monitor() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {History._meta.db_table} IN EXCLUSIVE MODE")
                held.set()
                assert lease_sent.wait(30)

                def lease_waits() -> bool:  # the lease statement is waiting for the lock
                    cursor.execute(
                        "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass "
                        "AND NOT granted",
                        [History._meta.db_table],
                    )
                    return cursor.fetchone()[0] > 0

                wait_until(lease_waits, 30, "the lease statement to wait for the lock")
                assert Task.objects.reset_expired() == 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=monitor)
    thread.start()
    try:
        assert held.wait(30)
        lease_sent.set()
        leased = Task.objects.lease(second, ["causal"])
    finally:
        lease_sent.set()
        thread.join(30)
    assert not errors, errors
    assert [t.pk for t in leased] == [task.pk]
    events = list(History.objects.filter(task=task).values_list("typ", "time"))
    assert [typ for typ, _ in events] == [
        EventType.ASSIGNMENT,
        EventType.TIMEOUT,
        EventType.ASSIGNMENT,
    ]
    times = [at for _, at in events]
    assert times == sorted(times), events
    stored = Task.objects.get(pk=task.pk)
    assert stored.updated == times[-1]


def test_history_rows_carry_the_time_of_their_task_row(worker):
    task = running_task(worker)
    task.heartbeat(worker, progress=0.5)
    task.yield_lease(worker)
    yielded = Task.objects.get(pk=task.pk).updated
    assert History.objects.filter(task=task).last().time == yielded
    assert Task.objects.reset_expired() == 1  # ready again, without a TaskTimeout
    [again] = Task.objects.lease(worker, ["default"])
    events = list(History.objects.filter(task=task).values_list("typ", "time"))
    assert [typ for typ, _ in events] == [
        EventType.ASSIGNMENT,
        EventType.YIELD,
        EventType.ASSIGNMENT,
    ]
    assert events[-1][1] == again.updated
    assert [at for _, at in events] == sorted(at for _, at in events)


# -- the HTTP API names the lease too -----------------------------------------------------------


@pytest.fixture
def http_worker():
    from django.contrib.auth.models import Permission, User
    from rest_framework.test import APIClient

    user = User.objects.create_user("http-worker", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="work_task"))
    client = APIClient()
    client.force_authenticate(user)
    worker = Worker.objects.register(queues=["default"], user=user)
    return client, worker


@pytest.mark.parametrize("operation", ["heartbeat", "complete", "abort", "yield"])
def test_an_http_call_from_an_earlier_lease_is_409_lease_lost(http_worker, operation):
    client, worker = http_worker
    first = running_task(worker, rn="t1")
    expire(first)
    Task.objects.reset_expired()
    [second] = Task.objects.lease(worker, ["default"])
    body: dict[str, object] = {"worker": worker.name}
    if operation == "abort":
        body["errors"] = [{"code": "x"}]

    missing = client.post(f"/api/scylla/tasks/t1/{operation}/", body, format="json")
    assert missing.status_code == 400 and "lease" in missing.json()["errors"]
    late = client.post(f"/api/scylla/tasks/t1/{operation}/", {**body, "lease": 1}, format="json")
    assert late.status_code == 409 and late.json()["code"] == "lease_lost", late.content
    assert Task.objects.get(pk=first.pk).status == Status.RUNNING
    held = client.post(f"/api/scylla/tasks/t1/{operation}/", {**body, "lease": 2}, format="json")
    assert held.status_code == 200, held.content
    assert held.json()["leases"] == second.leases == 2
