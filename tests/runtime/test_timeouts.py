"""Run-time limits: `timeout=` per task, per handler and per queue, enforced by the worker's
watchdog and by the database (the lease, and every heartbeat, capped at the limit); and the
lease kept only while heartbeats are answered."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from scylla_django import db
from scylla_django.conf import scylla_settings
from scylla_django.enums import EventType, Status
from scylla_django.exceptions import LeaseLost
from scylla_django.handlers import HandlerRegistry, handler
from scylla_django.models import History, Outcome, Task, Worker
from scylla_django.models.held import HeldLeaseQuerySet
from scylla_django.retries import Retry
from scylla_django.worker import TaskWorker, WorkerOptions
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.helpers import start_worker, stop_worker
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


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
    # Ten minutes of work: aborted long before, at its limit.
    task = Task.objects.submit("t-sleep", {"seconds": 600}, timeout=0.5)
    worker = TaskWorker(options("t-sleep"))
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED, timeout=60)
    stop_worker(worker, thread)
    task.refresh_from_db()
    [error] = task.errors
    assert error["code"] == "timeout"
    assert error["args"] == {"timeout": 0.5}


def test_the_handlers_timeout_applies_to_its_tasks():
    task = Task.objects.submit("t-timed", {})
    worker = TaskWorker(options("t-timed"))
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED, timeout=5)
    stop_worker(worker, thread)
    assert Task.objects.get(pk=task.pk).errors[0]["code"] == "timeout"


def test_a_handler_that_returns_after_its_limit_is_still_aborted_with_timeout(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 5}
    task = Task.objects.submit("t-late", {"extra": 0.3}, timeout=0.3)
    worker = TaskWorker(options("t-late"))
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED, timeout=5)
    stop_worker(worker, thread)
    task.refresh_from_db()
    assert task.result is None and task.errors[0]["code"] == "timeout"


def test_a_hung_handler_is_aborted_after_the_grace_and_the_worker_keeps_serving(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.5}
    # A handler that sleeps ten minutes and never checks: given up at its limit and grace.
    hung = Task.objects.submit("t-stubborn", {"seconds": 600}, timeout=0.5)
    worker = TaskWorker(options("t-stubborn", "t-echo", concurrency=1))
    thread = start_worker(worker)
    try:
        assert worker.hooks.wait_for("given_up", 1), worker.hooks
        wait_until(lambda: Task.objects.get(pk=hung.pk).status == Status.ABORTED, timeout=60)
        assert Task.objects.get(pk=hung.pk).errors[0]["code"] == "timeout"
        # Its thread still sleeps; another took its place, and the slot is free again.
        after = Task.objects.submit("t-echo", {"n": 1})
        wait_until(lambda: Task.objects.get(pk=after.pk).status == Status.COMPLETED, timeout=60)
        wait_until(lambda: not worker._slots.in_hand(), timeout=60, what="every slot free")
    finally:
        stop_worker(worker, thread)


def test_the_lease_ends_at_its_limit_however_long_it_asked_for(settings):
    """A lease longer than the run-time limit plus TIMEOUT_GRACE ends there: its worker
    needs no heartbeat to lose it at the limit."""
    settings.SCYLLA = {"TIMEOUT_GRACE": 1, "TIMEOUTS": {"t-sleep": "4s"}}
    worker = Worker.objects.register(["t-sleep"])
    own = Task.objects.submit("t-sleep", {}, timeout=2, priority=2)
    queues = Task.objects.submit("t-sleep", {}, priority=1)  # its queue's limit
    given = Task.objects.submit("t-echo", {})  # the limit the caller gives its queue
    free = Task.objects.submit("t-other", {})  # no limit at all
    leased = Task.objects.lease(worker, ["t-sleep", "t-other"], limit=3, lease_length=60)
    # `timeouts` in place of SCYLLA["TIMEOUTS"] (a worker's: its handlers', else those).
    leased += Task.objects.lease(worker, ["t-echo"], lease_length=60, timeouts={"t-echo": 5})
    rows = {task.pk: task for task in leased}
    assert set(rows) == {own.pk, queues.pk, given.pk, free.pk}
    for task, seconds in ((own, 2 + 1), (queues, 4 + 1), (given, 5 + 1)):
        row = rows[task.pk]
        limit = row.updated + timedelta(seconds=seconds)
        assert row.timeout_at == limit and row.deadline == limit
        assert Task.objects.get(pk=task.pk).deadline == limit  # as written
    assert rows[free.pk].timeout_at is None
    assert rows[free.pk].deadline == rows[free.pk].updated + timedelta(seconds=60)


def test_a_lease_shorter_than_its_limit_is_extended_up_to_it_and_no_further(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 1}
    worker = Worker.objects.register(["t-sleep"])
    task = Task.objects.submit("t-sleep", {}, timeout=30)
    free = Task.objects.submit("t-sleep", {})
    [leased, _] = Task.objects.lease(worker, ["t-sleep"], limit=2, lease_length=5)
    assert leased.pk == task.pk
    limit = leased.updated + timedelta(seconds=31)
    assert leased.timeout_at == limit and leased.deadline == leased.updated + timedelta(seconds=5)
    extended = Task.objects.heartbeat_many(
        worker, {task.pk: (1, None), free.pk: (1, None)}, lease_length=60
    )
    assert extended == {task.pk, free.pk}
    assert Task.objects.get(pk=task.pk).deadline == limit
    # Without a limit the same heartbeat extends it by the whole lease.
    assert Task.objects.get(pk=free.pk).deadline > limit + timedelta(seconds=25)
    # A single heartbeat (as over HTTP) is capped alike.
    leased.heartbeat(worker, lease_length=120)
    assert leased.deadline == limit == Task.objects.get(pk=task.pk).deadline


def test_a_debug_run_s_lease_has_no_limit(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 1}
    worker = Worker.objects.register(["t-sleep"])
    task = Task.objects.submit("t-sleep", {}, timeout=2)
    leased = Task.objects.lease_rn(worker, task.rn, lease_length=60)
    assert leased.timeout_at is None
    assert leased.deadline == leased.updated + timedelta(seconds=60)


def test_an_outcome_written_with_the_next_lease_caps_that_lease(settings):
    """`finish_and_lease` (PostgreSQL: one statement) caps the lease it makes as `lease`."""
    settings.SCYLLA = {"TIMEOUT_GRACE": 30}
    worker = Worker.objects.register(["t-sleep"])
    done = Task.objects.submit("t-sleep", {}, priority=1)
    [held] = Task.objects.lease(worker, ["t-sleep"])
    assert held.pk == done.pk and held.timeout_at is None
    Task.objects.submit("t-sleep", {})
    finished, [leased] = Task.objects.finish_and_lease(
        worker,
        [Outcome(held.pk, held.leases, result=1)],
        ["t-sleep"],
        lease_length=600,
        timeouts={"t-sleep": 3},
        timeout_grace=2,
    )
    assert finished == {held.pk}
    limit = leased.updated + timedelta(seconds=5)
    assert leased.timeout_at == limit and leased.deadline == limit
    assert Task.objects.get(pk=leased.pk).deadline == limit


def test_a_worker_gives_its_leases_its_handlers_limit_and_its_own_grace(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 30}
    task = Task.objects.submit("t-timed", {})  # the handler's timeout: 0.5 s
    worker = TaskWorker(options("t-timed", timeout_grace=timedelta(seconds=7)))
    thread = start_worker(worker)
    try:
        wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED, timeout=10)
    finally:
        stop_worker(worker, thread)
    assigned = History.objects.get(task=task, typ=EventType.ASSIGNMENT).time
    assert Task.objects.get(pk=task.pk).timeout_at == assigned + timedelta(seconds=7.5)


def test_a_task_whose_heartbeats_are_not_answered_is_given_up_before_its_lease_ends(
    monkeypatch,
):
    # Every heartbeat hangs, as one stuck in a dead connection does, until the test ends.
    answer = threading.Event()
    heartbeat_many = HeldLeaseQuerySet.heartbeat_many

    def unanswered(self, *args, **kwargs):
        answer.wait()
        return heartbeat_many(self, *args, **kwargs)

    monkeypatch.setattr(HeldLeaseQuerySet, "heartbeat_many", unanswered)
    registry = HandlerRegistry()
    stops: list[LeaseLost] = []

    @handler("t-checks", registry=registry)
    def checks(ctx):
        try:
            while True:
                ctx.check()
                time.sleep(0.05)
        except LeaseLost as exc:
            stops.append(exc)
            raise

    task = Task.objects.submit("t-checks", {})
    worker = TaskWorker(
        WorkerOptions(
            ["t-checks"], lease_length=timedelta(seconds=2), poll_interval=0.05, registry=registry
        )
    )
    thread = start_worker(worker)
    try:
        wait_until(lambda: stops, timeout=60, what="the task given up")
        wait_until(lambda: not worker._slots.in_hand(), timeout=60, what="its slot freed")
        task.refresh_from_db()
        assert task.status == Status.RUNNING  # nothing written: the lease expires, then a reset
    finally:
        answer.set()
        stop_worker(worker, thread)


def test_the_default_heartbeat_fits_three_times_in_a_lease_with_room_to_spare():
    options = WorkerOptions(["t-echo"], lease_length=timedelta(seconds=10))
    assert 3 * options.heartbeat_seconds < options.lease_length.total_seconds()


def test_the_worker_command_refuses_a_bad_timeout_grace(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 0}
    with pytest.raises(CommandError):
        call_command("scylla_worker", "--queue", "t-echo", "--once")


def capped_lease(timeout: float, **submit) -> tuple[Task, Worker]:
    """A task leased as a worker leases it, its lease capped at its limit."""
    worker = Worker.objects.register(["t-sleep"])
    task = Task.objects.submit("t-sleep", {}, timeout=timeout, **submit)
    [leased] = Task.objects.lease(worker, ["t-sleep"], lease_length=60)
    limit = leased.updated + timedelta(seconds=timeout) + scylla_settings.TIMEOUT_GRACE
    assert leased.timeout_at == limit and leased.deadline == min(limit, leased.deadline)
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
    assert Task.objects.heartbeat_many(worker, {task.pk: (1, None)}, lease_length=60) == {task.pk}
    task.refresh_from_db()
    assert task.deadline == limit and task.deadline < task.updated
    assert Task.objects.reset_expired() == 1
    task.refresh_from_db()
    assert task.status == Status.ABORTED and task.errors[0]["code"] == "timeout"
    events = list(History.objects.filter(task=task).values_list("typ", flat=True))
    assert events == [EventType.ASSIGNMENT, EventType.TIMEOUT, EventType.ABORT]


def test_a_lease_given_back_after_its_limit_is_aborted_with_timeout_not_made_ready(settings):
    """A yield is capped at the limit too: a worker that gives back (as when it stops) a lease
    that already ran into its limit leaves the task to be aborted with `timeout`, not to run
    again; one given back before the limit is made ready as any yield."""
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.1}
    task, worker = capped_lease(0.1)
    limit = Task.objects.get(pk=task.pk).timeout_at
    # Past the limit by more than the second a yield sets the deadline back.
    wait_until(lambda: db.read_clock("default") > limit + timedelta(seconds=1.1), what="limit")
    assert Task.objects.yield_many(worker, {task.pk: 1}) == {task.pk}
    task.refresh_from_db()
    assert task.deadline == limit < task.updated
    in_time, its_worker = capped_lease(60)
    assert Task.objects.yield_many(its_worker, {in_time.pk: 1}) == {in_time.pk}
    assert Task.objects.reset_expired() == 2
    task.refresh_from_db()
    assert task.status == Status.ABORTED and task.errors[0]["code"] == "timeout"
    events = list(History.objects.filter(task=task).order_by("id").values_list("typ", flat=True))
    assert events == [EventType.ASSIGNMENT, EventType.YIELD, EventType.TIMEOUT, EventType.ABORT]
    assert Task.objects.get(pk=in_time.pk).status == Status.READY


def test_a_lease_expired_before_its_limit_is_reset_as_any_other(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 60}
    task, worker = capped_lease(60)
    task.refresh_from_db()
    # A later heartbeat with a short lease: it expires before the limit.
    Task.objects.heartbeat_many(worker, {task.pk: (1, None)}, lease_length=0.1)
    wait_until(lambda: Task.objects.expired().filter(pk=task.pk).exists(), what="expiry")
    assert Task.objects.reset_expired() == 1
    task.refresh_from_db()
    assert task.status == Status.READY and task.timeout_at is None


def test_a_monitor_timeout_is_retried_by_a_policy_that_retries_timeouts(settings):
    """`Retry(timeouts=True)`, the default, retries the monitor's `timeout` abort; a policy
    with `timeouts=False` does not."""
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.1}
    task, _ = capped_lease(0.1, retry=Retry(max_attempts=2, crashes=False))
    kept, _ = capped_lease(0.1, retry=Retry(max_attempts=2, timeouts=False))
    for expiring in (task, kept):
        wait_until(lambda t=expiring: Task.objects.expired().filter(pk=t.pk).exists())
    assert Task.objects.reset_expired() == 2
    assert Task.objects.get(pk=task.pk).status == Status.ABORTED
    retry = Task.objects.get(retry_of=task.rn)
    assert retry.status == Status.READY and retry.attempt == 2
    assert retry.timeout_at is None and retry.timeout == timedelta(seconds=0.1)
    kept.refresh_from_db()
    assert kept.errors[0]["code"] == "timeout" and kept.dead is not None
    assert not Task.objects.filter(retry_of=kept.rn).exists()


def test_a_hung_async_handler_is_cancelled_and_aborted_with_timeout(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.3}
    hung = Task.objects.submit("t-async-hang", {}, timeout=0.3)
    worker = TaskWorker(options("t-async-hang", "t-echo", concurrency=1))
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.get(pk=hung.pk).status == Status.ABORTED, timeout=5)
    assert Task.objects.get(pk=hung.pk).errors[0]["code"] == "timeout"
    after = Task.objects.submit("t-echo", {})
    wait_until(lambda: Task.objects.get(pk=after.pk).status == Status.COMPLETED, timeout=5)
    stop_worker(worker, thread)


def test_a_timeout_is_retried_by_a_policy_that_retries_timeouts():
    task = Task.objects.submit("t-sleep", {"seconds": 30}, timeout=0.3, retry=Retry(max_attempts=2))
    worker = TaskWorker(options("t-sleep"))
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED, timeout=5)
    stop_worker(worker, thread)
    retry = Task.objects.get(retry_of=task.rn)
    assert retry.attempt == 2 and retry.timeout == timedelta(seconds=0.3)
