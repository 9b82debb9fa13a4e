"""Run-time limits: `timeout=` per task, per handler and per queue, enforced by the worker's
watchdog and capped in the heartbeat statement; and the lease kept only while heartbeats
are answered."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from scylla_django.enums import EventType, Status
from scylla_django.exceptions import LeaseLost
from scylla_django.handlers import HandlerRegistry, TaskContext, handler
from scylla_django.models import History, Task, Worker
from scylla_django.retries import Retry
from scylla_django.worker import TaskWorker, WorkerOptions
from scylla_django.worker.watchdog import Watchdog
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def run_in_thread(worker: TaskWorker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def stop(worker: TaskWorker, thread: threading.Thread) -> None:
    worker.stop()
    thread.join(15)
    assert not thread.is_alive()


def options(*queues: str, **kwargs) -> WorkerOptions:
    return WorkerOptions(list(queues), heartbeat_interval=0.2, poll_interval=0.05, **kwargs)


def test_a_task_timeout_is_stored_and_zero_or_negative_is_refused():
    task = Task.objects.submit("t-sleep", {}, timeout="90s")
    assert Task.objects.get(pk=task.pk).timeout == timedelta(seconds=90)
    assert Task.objects.submit("t-sleep", {}).timeout is None
    for bad in (0, -1, "0s", "soon"):
        with pytest.raises(ValidationError) as caught:
            Task.objects.submit("t-sleep", {}, timeout=bad)
        assert caught.value.error_dict["timeout"][0].code == "invalid_timeout"
    [outcome] = Task.objects.submit_many([{"queue": "t-sleep", "spec": {}, "timeout": 2.5}])
    assert Task.objects.get(rn=outcome.rn).timeout == timedelta(seconds=2.5)
    [bad] = Task.objects.submit_many([{"queue": "t-sleep", "spec": {}, "timeout": -3}])
    assert bad.outcome == "invalid" and "timeout" in bad.errors


def test_a_handler_timeout_must_be_positive():
    with pytest.raises(ValidationError) as caught:
        handler("t-never", registry=HandlerRegistry(), timeout=0)
    assert caught.value.code == "invalid_timeout"


def test_the_timeout_in_force_is_the_tasks_then_the_handlers_then_the_queues(settings):
    registry = HandlerRegistry()
    handler("q-a", registry=registry, timeout="2m")(lambda ctx: None)
    handler("q-b", registry=registry)(lambda ctx: None)
    settings.SCYLLA = {"TIMEOUTS": {"q-a": "1h", "q-b": "5m"}}
    assert registry.timeout_of(Task(queue="q-a")) == timedelta(minutes=2)
    assert registry.timeout_of(Task(queue="q-a", timeout=timedelta(seconds=7))) == timedelta(
        seconds=7
    )
    assert registry.timeout_of(Task(queue="q-b")) == timedelta(minutes=5)
    assert registry.timeout_of(Task(queue="q-c")) is None


def test_a_handler_that_checks_is_aborted_with_timeout_at_its_limit():
    task = Task.objects.submit("t-sleep", {"seconds": 30}, timeout=0.5)
    worker = TaskWorker(options("t-sleep"))
    thread = run_in_thread(worker)
    started = time.monotonic()
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED, timeout=5)
    assert time.monotonic() - started < 6
    stop(worker, thread)
    task.refresh_from_db()
    [error] = task.errors
    assert error["code"] == "timeout"
    assert error["args"] == {"timeout": 0.5}


def test_the_handlers_timeout_applies_to_its_tasks():
    task = Task.objects.submit("t-timed", {})
    worker = TaskWorker(options("t-timed"))
    thread = run_in_thread(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED, timeout=5)
    stop(worker, thread)
    assert Task.objects.get(pk=task.pk).errors[0]["code"] == "timeout"


def test_a_handler_that_returns_after_its_limit_is_still_aborted_with_timeout(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 5}
    task = Task.objects.submit("t-late", {"extra": 0.3}, timeout=0.3)
    worker = TaskWorker(options("t-late"))
    thread = run_in_thread(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED, timeout=5)
    stop(worker, thread)
    task.refresh_from_db()
    assert task.result is None and task.errors[0]["code"] == "timeout"


def test_a_hung_handler_is_aborted_after_the_grace_and_the_worker_keeps_serving(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.5}
    hung = Task.objects.submit("t-stubborn", {"seconds": 30}, timeout=0.5)
    worker = TaskWorker(options("t-stubborn", "t-echo", concurrency=1))
    thread = run_in_thread(worker)
    started = time.monotonic()
    wait_until(lambda: Task.objects.get(pk=hung.pk).status == Status.ABORTED, timeout=5)
    assert time.monotonic() - started < 0.5 + 0.5 + 5  # timeout + grace, and a loaded machine
    assert Task.objects.get(pk=hung.pk).errors[0]["code"] == "timeout"
    # Its thread still sleeps; another took its place, and the slot is free again.
    after = Task.objects.submit("t-echo", {"n": 1})
    wait_until(lambda: Task.objects.get(pk=after.pk).status == Status.COMPLETED, timeout=5)
    wait_until(lambda: worker.in_flight_count() == 0, timeout=5, what="every slot free")
    stop(worker, thread)


def test_the_heartbeat_never_extends_a_lease_past_its_limit(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 1}
    worker = Worker.objects.register(["t-sleep"])
    task = Task.objects.submit("t-sleep", {}, timeout=2)
    [leased] = Task.objects.lease(worker, ["t-sleep"], lease_length=60)
    ctx = TaskContext(leased, worker)
    ctx.timeout = leased.timeout
    limit = Watchdog(WorkerOptions(["t-sleep"]), str).lease_limit(ctx)
    assert limit == leased.updated + timedelta(seconds=3)
    extended = Task.objects.heartbeat_many(
        worker, {task.pk: (1, None)}, lease_length=60, limits={task.pk: limit}
    )
    assert extended == {task.pk}
    assert Task.objects.get(pk=task.pk).deadline == limit
    # Without a limit the same heartbeat extends it by the whole lease.
    Task.objects.heartbeat_many(worker, {task.pk: (1, None)}, lease_length=60)
    assert Task.objects.get(pk=task.pk).deadline > limit + timedelta(seconds=50)


def test_a_task_whose_heartbeats_are_not_answered_is_given_up_before_its_lease_ends():
    task = Task.objects.submit("t-sleep", {"seconds": 30})
    worker = TaskWorker(
        WorkerOptions(["t-sleep"], lease_length=timedelta(seconds=2), poll_interval=0.05)
    )
    thread = run_in_thread(worker)
    try:
        # The slot, not the row: the task is running in the database a moment before the
        # worker's slots list it.
        wait_until(lambda: worker._slots.in_hand(), what="the task in hand")
        [ctx] = worker._slots.in_hand()
        # As if every heartbeat since the lease had gone unanswered.
        ctx.lease_kept_until = time.monotonic()
        wait_until(lambda: worker.in_flight_count() == 0, timeout=30, what="the task given up")
        assert isinstance(ctx.stop_reason, LeaseLost)
        task.refresh_from_db()
        assert task.status == Status.RUNNING  # nothing written: the lease expires, then a reset
    finally:
        stop(worker, thread)


def test_the_default_heartbeat_fits_three_times_in_a_lease_with_room_to_spare():
    options = WorkerOptions(["t-echo"], lease_length=timedelta(seconds=10))
    assert 3 * options.heartbeat_seconds < options.lease_length.total_seconds()


def test_the_worker_command_refuses_a_bad_timeout_grace(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 0}
    with pytest.raises(CommandError):
        call_command("scylla_worker", "--queue", "t-echo", "--once")


def capped_lease(timeout: float, **submit) -> tuple[Task, Worker]:
    """A task leased and heartbeaten as a worker does, its lease capped at its limit."""
    worker = Worker.objects.register(["t-sleep"])
    task = Task.objects.submit("t-sleep", {}, timeout=timeout, **submit)
    [leased] = Task.objects.lease(worker, ["t-sleep"], lease_length=60)
    ctx = TaskContext(leased, worker)
    ctx.timeout = leased.timeout
    limit = Watchdog(WorkerOptions(["t-sleep"]), str).lease_limit(ctx)
    assert limit is not None
    Task.objects.heartbeat_many(
        worker, {task.pk: (1, None)}, lease_length=60, limits={task.pk: limit}
    )
    assert Task.objects.get(pk=task.pk).timeout_at == limit
    return task, worker


def test_a_lease_expired_at_its_limit_is_aborted_with_timeout_by_the_monitor(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.1}
    task, _ = capped_lease(0.1)
    wait_until(lambda: Task.objects.expired().filter(pk=task.pk).exists(), what="expiry")
    assert Task.objects.reset_expired() == 1
    task.refresh_from_db()
    assert task.status == Status.ABORTED
    assert task.errors[0]["code"] == "timeout"
    assert task.dead is not None  # no policy: a dead letter
    events = list(History.objects.filter(task=task).values_list("typ", flat=True))
    assert events[-2:] == [EventType.TIMEOUT, EventType.ABORT]


def test_a_heartbeat_past_the_limit_is_not_taken_for_a_yield_by_the_monitor(settings):
    """A heartbeat sent once the limit has passed caps the deadline at it, before the row's
    new `updated`, as a yield leaves a row; the monitor still reads History (no TaskYield)
    and aborts the task with `timeout`."""
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.1}
    task, worker = capped_lease(0.1)
    wait_until(lambda: Task.objects.expired().filter(pk=task.pk).exists(), what="expiry")
    limit = Task.objects.get(pk=task.pk).timeout_at
    assert Task.objects.heartbeat_many(
        worker, {task.pk: (1, None)}, lease_length=60, limits={task.pk: limit}
    ) == {task.pk}
    task.refresh_from_db()
    assert task.deadline == limit and task.deadline < task.updated
    assert Task.objects.reset_expired() == 1
    task.refresh_from_db()
    assert task.status == Status.ABORTED and task.errors[0]["code"] == "timeout"
    events = list(History.objects.filter(task=task).values_list("typ", flat=True))
    assert events == [EventType.ASSIGNMENT, EventType.TIMEOUT, EventType.ABORT]


def test_a_lease_expired_before_its_limit_is_reset_as_any_other(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 60}
    task, worker = capped_lease(60)
    task.refresh_from_db()
    # A later heartbeat, not capped, with a short lease: it expires before the limit.
    Task.objects.heartbeat_many(
        worker, {task.pk: (1, None)}, lease_length=0.1, limits={task.pk: task.timeout_at}
    )
    wait_until(lambda: Task.objects.expired().filter(pk=task.pk).exists(), what="expiry")
    assert Task.objects.reset_expired() == 1
    task.refresh_from_db()
    assert task.status == Status.READY and task.timeout_at is None


def test_a_monitor_timeout_is_retried_by_a_policy_that_names_its_code(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.1}
    task, _ = capped_lease(0.1, retry=Retry(max_attempts=2, codes=("timeout",)))
    wait_until(lambda: Task.objects.expired().filter(pk=task.pk).exists(), what="expiry")
    assert Task.objects.reset_expired() == 1
    assert Task.objects.get(pk=task.pk).status == Status.ABORTED
    retry = Task.objects.get(retry_of=task.rn)
    assert retry.status == Status.READY and retry.attempt == 2
    assert retry.timeout_at is None and retry.timeout == timedelta(seconds=0.1)


def test_a_hung_async_handler_is_cancelled_and_aborted_with_timeout(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.3}
    hung = Task.objects.submit("t-async-hang", {}, timeout=0.3)
    worker = TaskWorker(options("t-async-hang", "t-echo", concurrency=1))
    thread = run_in_thread(worker)
    wait_until(lambda: Task.objects.get(pk=hung.pk).status == Status.ABORTED, timeout=5)
    assert Task.objects.get(pk=hung.pk).errors[0]["code"] == "timeout"
    after = Task.objects.submit("t-echo", {})
    wait_until(lambda: Task.objects.get(pk=after.pk).status == Status.COMPLETED, timeout=5)
    stop(worker, thread)


def test_a_timeout_is_retried_by_a_policy_that_names_its_code():
    task = Task.objects.submit(
        "t-sleep", {"seconds": 30}, timeout=0.3, retry=Retry(max_attempts=2, codes=("timeout",))
    )
    worker = TaskWorker(options("t-sleep"))
    thread = run_in_thread(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED, timeout=5)
    stop(worker, thread)
    retry = Task.objects.get(retry_of=task.rn)
    assert retry.attempt == 2 and retry.timeout == timedelta(seconds=0.3)
