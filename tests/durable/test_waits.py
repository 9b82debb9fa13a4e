"""Durable sleeps and waits: a parked task is ready with its wait's timeout as `not_before`,
holds no lease, and runs again when an event or a signal wakes it or its time comes; its
completed steps are not run again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from scylla_django import TIMED_OUT, emit, pytest_plugin
from scylla_django.enums import Status
from scylla_django.exceptions import SignalAlreadySent, TaskFinished
from scylla_django.handlers import HandlerRegistry, TaskContext, handler
from scylla_django.models import PARKED, Task, TaskSignal, Wait
from scylla_django.models.waits import read_signal_token, signal_token

pytestmark = pytest.mark.django_db(transaction=True)
needs_clock = pytest.mark.skipif(
    connection.vendor == "mysql", reason="the virtual clock runs on PostgreSQL and SQLite"
)

scylla_clock = pytest_plugin.scylla_clock


def leasable(task: Task) -> bool:
    """Whether the lease would take `task` now."""
    return Task.objects.ready([task.queue]).filter(pk=task.pk).exists()


def run(rn: str, registry: HandlerRegistry) -> Task:
    from scylla_django.testing import run_task

    return run_task(rn, registry=registry)


@needs_clock
def test_a_durable_sleep_gives_the_lease_back_and_resumes_after_its_steps(scylla_clock):
    registry = HandlerRegistry()
    ran: list[str] = []

    @handler("w-sleep", registry=registry)
    def sleeper(ctx: TaskContext) -> dict:
        ctx.step("before", lambda: ran.append("before"))
        ctx.durable_sleep("1h")
        ran.append("after")
        return ctx.steps

    task = Task.objects.submit("w-sleep", {})
    parked = run(task.rn, registry)
    assert (parked.status, parked.owner, parked.attempt) == (Status.READY, None, 1)
    wait = Wait.objects.get(task=task)
    assert (wait.name, wait.kind, wait.outcome) == ("sleep", "sleep", None)
    assert parked.not_before == wait.timeout == wait.started + timedelta(hours=1)
    assert not leasable(parked)
    scylla_clock.advance(timedelta(minutes=61))
    assert leasable(parked)
    done = run(task.rn, registry)
    assert done.status == Status.COMPLETED
    assert ran == ["before", "after"]
    assert Wait.objects.get(task=task).outcome == "woken"


def test_a_matching_event_wakes_a_waiting_task_with_its_payload():
    registry = HandlerRegistry()

    @handler("w-event", registry=registry)
    def waiter(ctx: TaskContext) -> object:
        return ctx.wait_for("file.arrived", match={"dataset": ctx.spec["dataset"]})

    task = Task.objects.submit("w-event", {"dataset": "sales"})
    parked = run(task.rn, registry)
    assert (parked.status, parked.not_before) == (Status.READY, PARKED)
    emit("file.arrived", {"dataset": "stock"})
    emit("other.kind", {"dataset": "sales"})
    assert not leasable(parked)
    with transaction.atomic():
        emit("file.arrived", {"dataset": "sales", "rows": 4})
        transaction.set_rollback(True)  # an event of a rolled-back transaction never existed
    assert not leasable(parked)
    emit("file.arrived", {"dataset": "sales", "rows": 3})
    assert leasable(parked)
    emit("file.arrived", {"dataset": "sales", "rows": 5})  # the wait is woken once
    done = run(task.rn, registry)
    assert (done.status, done.result) == (Status.COMPLETED, {"dataset": "sales", "rows": 3})


def test_an_event_emitted_before_the_wait_began_does_not_wake_it():
    registry = HandlerRegistry()

    @handler("w-before", registry=registry)
    def waiter(ctx: TaskContext) -> object:
        return ctx.wait_for("file.arrived")

    task = Task.objects.submit("w-before", {})
    emit("file.arrived", {"n": 1})
    parked = run(task.rn, registry)
    assert parked.status == Status.READY and not leasable(parked)


def test_a_signal_sent_before_the_wait_is_kept_and_taken_without_parking():
    registry = HandlerRegistry()

    @handler("w-early", registry=registry)
    def approval(ctx: TaskContext) -> object:
        return ctx.wait_for(signal="approved", timeout="1d")

    task = Task.objects.submit("w-early", {})
    task.signal("approved", {"by": "ann"})
    done = run(task.rn, registry)
    assert (done.status, done.result, done.snoozes) == (Status.COMPLETED, {"by": "ann"}, 0)


def test_a_signal_wakes_its_wait_and_is_delivered_once():
    registry = HandlerRegistry()

    @handler("w-signal", registry=registry)
    def approval(ctx: TaskContext) -> object:
        return ctx.wait_for(signal="approved")

    task = Task.objects.submit("w-signal", {})
    parked = run(task.rn, registry)
    assert not leasable(parked)
    task.signal("approved", {"by": "bo"})
    with pytest.raises(SignalAlreadySent) as second:
        task.signal("approved", {"by": "eve"})
    assert second.value.code == "signal_already_sent"
    assert leasable(parked)
    done = run(task.rn, registry)
    assert (done.status, done.result) == (Status.COMPLETED, {"by": "bo"})
    with pytest.raises(TaskFinished) as finished:
        task.signal("later")
    assert finished.value.code == "task_finished"
    assert TaskSignal.objects.filter(task=task).count() == 1


@pytest.mark.parametrize(
    ("name", "payload", "code"),
    [("", None, "invalid_name"), ("ok", {"x": float("nan")}, "invalid_json")],
)
def test_a_bad_signal_is_refused_and_writes_nothing(name, payload, code):
    task = Task.objects.submit("w-bad", {})
    with pytest.raises(ValidationError) as refused:
        task.signal(name, payload)
    assert refused.value.code == code
    assert not TaskSignal.objects.exists()


@needs_clock
def test_a_wait_that_times_out_returns_the_marker_or_raises(scylla_clock):
    registry = HandlerRegistry()

    @handler("w-timeout", registry=registry)
    def approval(ctx: TaskContext) -> object:
        decision = ctx.wait_for(signal="approved", timeout="10m")
        if decision is TIMED_OUT:
            return "no answer"
        return decision

    @handler("w-raise", registry=registry)
    def strict(ctx: TaskContext) -> object:
        return ctx.wait_for(signal="approved", timeout="10m", on_timeout="raise")

    returning = Task.objects.submit("w-timeout", {})
    raising = Task.objects.submit("w-raise", {})
    for task in (returning, raising):
        parked = run(task.rn, registry)
        assert parked.not_before == Wait.objects.get(task=task).timeout
    scylla_clock.advance(timedelta(minutes=11))
    done = run(returning.rn, registry)
    assert (done.status, done.result) == (Status.COMPLETED, "no answer")
    aborted = run(raising.rn, registry)
    assert aborted.status == Status.ABORTED
    assert "WaitTimedOut" in aborted.errors[0]["args"]["type"]
    assert Wait.objects.get(task=raising).outcome == "timed_out"


def test_a_task_leased_early_parks_again_until_its_wait_ends():
    """An operator's "run now" leases a parked task: its run parks it again."""
    registry = HandlerRegistry()
    ran: list[int] = []

    @handler("w-early-run", registry=registry)
    def approval(ctx: TaskContext) -> object:
        ran.append(1)
        return ctx.wait_for(signal="go")

    task = Task.objects.submit("w-early-run", {})
    run(task.rn, registry)
    again = run(task.rn, registry)
    assert (again.status, again.not_before, len(ran)) == (Status.READY, PARKED, 2)
    assert Wait.objects.filter(task=task).count() == 1


def test_a_signal_token_names_its_task_and_signal_and_nothing_else():
    task = Task.objects.submit("w-token", {})
    token = signal_token(task, "approved")
    assert read_signal_token(token) == (task.rn, "approved")
    with pytest.raises(ValidationError) as bad:
        read_signal_token(token[:-2] + "xx")
    assert bad.value.code == "invalid_token"


def test_a_match_on_nested_paths_wakes_only_on_a_payload_that_holds_them():
    registry = HandlerRegistry()

    @handler("w-nested", registry=registry)
    def waiter(ctx: TaskContext) -> object:
        return ctx.wait_for("order.paid", match={"order.id": 7, "order.live": True})

    task = Task.objects.submit("w-nested", {})
    parked = run(task.rn, registry)
    assert Wait.objects.get(task=task).match == {"order": {"id": 7, "live": True}}
    emit("order.paid", {"order": {"id": 7, "live": 1}})  # 1 is no boolean
    emit("order.paid", {"order": {"id": 8, "live": True}})
    emit("order.paid", {"order": 7})
    assert not leasable(parked)
    emit("order.paid", {"order": {"id": 7, "live": True, "total": 5}, "by": "ann"})
    assert leasable(parked)


def test_a_match_whose_paths_conflict_is_refused():
    registry = HandlerRegistry()
    caught: list[ValidationError] = []

    @handler("w-conflict", registry=registry)
    def waiter(ctx: TaskContext) -> object:
        try:
            return ctx.wait_for("x", match={"a": 1, "a.b": 2})
        except ValidationError as exc:
            caught.append(exc)
            raise

    task = Task.objects.submit("w-conflict", {})
    assert run(task.rn, registry).status == Status.ABORTED
    assert [exc.code for exc in caught] == ["invalid_match"]
    assert not Wait.objects.exists()


def test_scylla_run_says_a_task_parked_and_writes_its_wait():
    from django.core.management import CommandError, call_command

    @handler("w-run-park")
    def approval(ctx: TaskContext) -> object:
        return ctx.wait_for(signal="go")

    task = Task.objects.submit("w-run-park", {})
    with pytest.raises(CommandError) as failed:
        call_command("scylla_run", task.rn)
    assert "parked: signal:go waits for signal go" in str(failed.value)
    assert "ready again when the wait ends" in str(failed.value)
    assert Task.objects.get(pk=task.pk).not_before == PARKED


def test_a_worker_parks_a_sleeping_task_frees_its_slot_and_runs_it_again():
    import threading

    from scylla_django.worker import TaskWorker, WorkerOptions
    from tests.processes import wait_until

    registry = HandlerRegistry()

    @handler("w-worker-nap", registry=registry)
    def nap(ctx: TaskContext) -> object:
        first = ctx.step("first", lambda: ctx.task.leases)
        ctx.durable_sleep(0.3)
        return {"first": first, "now": ctx.task.leases}

    @handler("w-worker-echo", registry=registry)
    def echo(ctx: TaskContext) -> object:
        return "ran while the other slept"

    napping = Task.objects.submit("w-worker-nap", {})
    worker = TaskWorker(
        WorkerOptions(
            ["w-worker-nap", "w-worker-echo"],
            registry=registry,
            concurrency=1,
            poll_interval=0.05,
            heartbeat_interval=0.2,
        )
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: Wait.objects.filter(task=napping).exists(), what="parked")
        # Its one slot is free while the task sleeps: another task runs meanwhile.
        other = Task.objects.submit("w-worker-echo", {})
        wait_until(lambda: Task.objects.get(pk=other.pk).status == Status.COMPLETED)
        wait_until(lambda: Task.objects.get(pk=napping.pk).status == Status.COMPLETED)
    finally:
        worker.stop()
        thread.join(15)
    assert not thread.is_alive()
    done = Task.objects.get(pk=napping.pk)
    assert (done.result, done.snoozes, done.attempt) == ({"first": 1, "now": 2}, 1, 1)


def test_the_eager_mode_parks_a_waiting_task_and_drain_runs_it_once_woken():
    from django.test import override_settings

    from scylla_django.testing import drain
    from tests import durable_handlers  # noqa: F401  (registers d-approve)

    with override_settings(SCYLLA={"EAGER": True}):
        task = Task.objects.submit("d-approve", {})
    parked = Task.objects.get(pk=task.pk)
    assert (parked.status, parked.not_before) == (Status.READY, PARKED)
    assert drain(["d-approve"]) == []  # parked: nothing to run
    task.signal("go", "yes")
    [done] = drain(["d-approve"])
    assert (done.status, done.result) == (Status.COMPLETED, {"go": "yes"})
