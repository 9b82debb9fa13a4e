"""Liveness of workers and monitors on the database clock, purging their records, "reset lease
now", and the error-code filter."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from scylla_django.enums import EventType, Liveness, Status
from scylla_django.exceptions import InvalidTransition, LeaseLost, OwnerAlive, TaskNotFound
from scylla_django.models import History, Monitor, Task, Worker
from scylla_django.monitor import Monitor as MonitorLoop
from tests.factories import TaskFactory, running_task
from tests.helpers import Stopwatch, typs

pytestmark = pytest.mark.django_db


def backdate(worker: Worker, *, silent: bool = True, dead: bool = False) -> None:
    """Move a worker's silent/dead moments into the past, as if it had not been seen."""
    values = {}
    if silent:
        values["silent_at"] = Now() - timedelta(seconds=1)
    if dead:
        values["dead_at"] = Now() - timedelta(seconds=1)
    Worker.objects.filter(pk=worker.pk).update(**values)


def states() -> dict[str, str]:
    return {w.name: w.liveness for w in Worker.objects.with_state()}


def test_register_records_the_intervals_and_when_the_worker_turns_silent_and_dead():
    w = Worker.objects.register(["q"], heartbeat_interval=2, lease_length=timedelta(seconds=9))
    assert w.heartbeat_interval == timedelta(seconds=2)
    assert w.lease_length == timedelta(seconds=9)
    assert w.silent_at - w.last_seen == pytest.approx(timedelta(seconds=4), abs=timedelta(0.01))
    assert w.dead_at - w.last_seen == pytest.approx(timedelta(seconds=9), abs=timedelta(0.01))


def test_defaults_come_from_the_lease_length_setting(settings):
    settings.SCYLLA = {"LEASE_LENGTH": 30}
    w = Worker.objects.register(["q"])
    # A quarter of the lease, as for every worker: three heartbeats fit with room to spare.
    assert (w.lease_length, w.heartbeat_interval) == (timedelta(seconds=30), timedelta(seconds=7.5))


@pytest.mark.parametrize("kwargs", [{"heartbeat_interval": 0}, {"lease_length": -1}])
def test_register_refuses_bad_intervals(kwargs):
    with pytest.raises(Exception) as caught:
        Worker.objects.register(["q"], **kwargs)
    assert type(caught.value).__name__ == "ValidationError"


def test_states_alive_silent_dead_stopped(worker, other_worker):
    third = Worker.objects.register(["q"])
    fourth = Worker.objects.register(["q"])
    backdate(other_worker)
    backdate(third, dead=True)
    fourth.stop()
    assert states() == {
        worker.name: Liveness.ALIVE,
        other_worker.name: Liveness.SILENT,
        third.name: Liveness.DEAD,
        fourth.name: Liveness.STOPPED,
    }
    for state, expected in [
        (Liveness.ALIVE, [worker]),
        (Liveness.SILENT, [other_worker]),
        (Liveness.DEAD, [third]),
        (Liveness.STOPPED, [fourth]),
    ]:
        assert list(Worker.objects.in_state(state)) == expected
        assert [w.current_state() for w in expected] == [state]
    assert set(Worker.objects.in_state("silent", "dead")) == {other_worker, third}


def test_a_touch_brings_a_silent_worker_back(worker):
    backdate(worker, dead=True)
    assert worker.current_state() == Liveness.DEAD
    worker.touch()
    assert worker.current_state() == Liveness.ALIVE


def test_rows_without_liveness_columns_are_judged_by_last_seen(settings, worker):
    settings.SCYLLA = {"LEASE_LENGTH": 30}
    Worker.objects.filter(pk=worker.pk).update(
        silent_at=None, dead_at=None, last_seen=Now() - timedelta(seconds=25)
    )
    assert worker.current_state() == Liveness.SILENT
    Worker.objects.filter(pk=worker.pk).update(last_seen=Now() - timedelta(seconds=31))
    assert worker.current_state() == Liveness.DEAD
    Worker.objects.filter(pk=worker.pk).update(last_seen=Now())
    assert worker.current_state() == Liveness.ALIVE


def test_serving_matches_queue_names_exactly():
    a = Worker.objects.register(["emails", "reports"])
    Worker.objects.register(["Emails", "emails2"])
    assert list(Worker.objects.serving("emails")) == [a]
    assert list(Worker.objects.serving("reports")) == [a]
    assert not Worker.objects.serving("mail").exists()


def test_purge_deletes_old_workers_that_hold_no_running_task(worker, other_worker):
    task = running_task(other_worker)
    recent = Worker.objects.register(["q"])
    Worker.objects.exclude(pk=recent.pk).update(last_seen=Now() - timedelta(days=11))
    assert Worker.objects.purge(timedelta(days=10), chunk_size=1) == 1
    assert set(Worker.objects.all()) == {other_worker, recent}
    Task.objects.filter(pk=task.pk).update(deadline=Now() - timedelta(seconds=1))
    Task.objects.reset_expired()
    assert Worker.objects.purge() == 1
    assert list(Worker.objects.all()) == [recent]


# -- monitors ---------------------------------------------------------------------------------


def test_no_monitor_means_missing():
    status = Monitor.objects.status()
    assert status.missing
    assert status.last_pass is None and status.last_pass_age is None


def test_a_monitor_pass_registers_and_touches_the_monitor(worker):
    loop = MonitorLoop(interval=2)
    loop.run_once()
    [record] = Monitor.objects.all()
    assert record.name.startswith("monitor-") and record.interval == timedelta(seconds=2)
    first = record.last_pass
    assert first is not None
    clock = Stopwatch()
    loop.run_once()
    record.refresh_from_db()
    assert record.last_pass > first
    assert Monitor.objects.count() == 1
    status = Monitor.objects.status()
    assert not status.missing
    assert status.last_pass == record.last_pass
    assert clock.bounds(status.last_pass_age.total_seconds(), 0)
    assert [m.liveness for m in Monitor.objects.with_state()] == [Liveness.ALIVE]


def test_missing_after_three_intervals_without_a_pass():
    MonitorLoop(interval=2).run_once()
    record = Monitor.objects.get()
    Monitor.objects.filter(pk=record.pk).update(silent_at=Now() - timedelta(seconds=1))
    assert list(Monitor.objects.in_state(Liveness.SILENT)) == [record]
    assert not Monitor.objects.status().missing  # silent: two intervals, not yet three
    Monitor.objects.filter(pk=record.pk).update(dead_at=Now() - timedelta(seconds=1))
    assert Monitor.objects.status().missing
    assert list(Monitor.objects.in_state(Liveness.DEAD)) == [record]


def test_a_one_shot_monitor_counts_until_three_intervals_after_its_pass():
    loop = MonitorLoop(interval=60)
    loop.run(once=True)
    record = Monitor.objects.get()
    assert record.stopped is not None
    assert list(Monitor.objects.in_state(Liveness.STOPPED)) == [record]
    assert not Monitor.objects.status().missing


def test_the_monitor_purges_old_worker_and_monitor_records():
    old = Worker.objects.register(["q"])
    Worker.objects.filter(pk=old.pk).update(last_seen=Now() - timedelta(days=30))
    Monitor.objects.register(5)
    Monitor.objects.update(last_seen=Now() - timedelta(days=30))
    result = MonitorLoop(interval=5).run_once()
    assert result.workers_purged == 2
    assert not Worker.objects.exists()
    assert Monitor.objects.count() == 1  # this monitor's own, new record


# -- reset lease now --------------------------------------------------------------------------


def test_reset_lease_of_a_silent_owner(worker):
    task = running_task(worker)
    task.heartbeat(worker, progress=0.5)
    backdate(worker)
    task.reset_lease(worker.name, 1)
    assert (task.status, task.owner, task.deadline, task.progress) == (Status.READY, None, None, 0)
    last = History.objects.filter(task=task).last()
    assert (last.typ, last.worker, last.progress) == (EventType.TIMEOUT, worker.name, 0.5)
    with pytest.raises(LeaseLost):  # the worker resumes: its writes are refused
        task.heartbeat(worker)
    with pytest.raises(LeaseLost):
        Task.objects.get(pk=task.pk).complete(worker)
    [again] = Task.objects.lease(worker, ["default"])
    assert again.leases == 2


def test_reset_lease_refuses_an_alive_owner(worker):
    task = running_task(worker)
    with pytest.raises(OwnerAlive) as caught:
        task.reset_lease(worker.name, 1)
    assert caught.value.code == "owner_alive"
    assert Task.objects.get(pk=task.pk).status == Status.RUNNING
    assert typs(task) == [EventType.ASSIGNMENT]


@pytest.mark.parametrize("state", ["dead", "stopped", "purged"])
def test_reset_lease_of_a_dead_stopped_or_unknown_owner(worker, state):
    task = running_task(worker)
    if state == "dead":
        backdate(worker, dead=True)
    elif state == "stopped":
        worker.stop()
    else:
        Worker.objects.filter(pk=worker.pk).delete()
    task.reset_lease(worker.name, 1)
    assert Task.objects.get(pk=task.pk).status == Status.READY


def test_reset_lease_is_fenced_on_owner_and_lease(worker, other_worker):
    task = running_task(worker)
    backdate(worker)
    stale = Task.objects.get(pk=task.pk)
    task.reset_lease(worker.name, 1)
    [again] = Task.objects.lease(other_worker, ["default"])
    backdate(other_worker)
    with pytest.raises(LeaseLost, match="under lease 2"):
        stale.reset_lease(worker.name, 1)  # what the operator saw is gone
    with pytest.raises(LeaseLost):
        stale.reset_lease(other_worker.name, 1)
    assert Task.objects.get(pk=task.pk).owner == other_worker.name
    again.reset_lease(other_worker.name, 2)
    assert typs(task) == [EventType.ASSIGNMENT, EventType.TIMEOUT] * 2


def test_reset_lease_of_a_task_that_is_not_running(worker):
    task = TaskFactory()
    with pytest.raises(InvalidTransition) as caught:
        task.reset_lease(worker.name, 0)
    assert type(caught.value) is InvalidTransition
    Task.objects.filter(pk=task.pk).delete()
    with pytest.raises(TaskNotFound):
        task.reset_lease(worker.name, 0)


# -- error codes ------------------------------------------------------------------------------


def test_with_error_code_looks_at_every_error(worker):
    tasks = [running_task(worker) for _ in range(3)]
    error = {"args": {"code": "nested"}, "description": ""}
    tasks[0].abort(worker, [{"code": "timeout", **error}])
    tasks[1].abort(worker, [{"code": "first", **error}, {"code": "timeout", **error}])
    tasks[2].abort(worker, [{"code": "other", **error}])
    assert set(Task.objects.with_error_code("timeout")) == {tasks[0], tasks[1]}
    assert list(Task.objects.with_error_code("other")) == [tasks[2]]
    assert not Task.objects.with_error_code("nested").exists()
    assert not Task.objects.with_error_code("time").exists()
