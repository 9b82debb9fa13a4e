"""`with ctx.fenced():` — a handler's own writes commit only while its worker holds the lease."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connections, transaction
from django.db.models.functions import Now

from scylla_django.enums import Status
from scylla_django.exceptions import LeaseLost
from scylla_django.handlers import HandlerRegistry, TaskContext, handler
from scylla_django.models import Task, Worker
from scylla_django.worker import TaskWorker, WorkerOptions
from tests.helpers import lock_waits
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def expire_and_reset(task: Task) -> int:
    """What the monitor does once the task's lease has run out (as if it had). One transaction:
    the worker's heartbeat, every 0.2 s, renews the lease of a running task, and one that came
    between the two statements would leave nothing expired to reset."""
    with transaction.atomic():
        Task.objects.filter(pk=task.pk).update(
            deadline=Now() - timedelta(seconds=1), updated=Now() - timedelta(seconds=2)
        )
        return Task.objects.reset_expired()


def run(registry: HandlerRegistry, queue: str) -> tuple[TaskWorker, threading.Thread]:
    worker = TaskWorker(
        WorkerOptions([queue], registry=registry, poll_interval=0.05, heartbeat_interval=0.2)
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def stop(worker: TaskWorker, thread: threading.Thread) -> None:
    worker.stop()
    thread.join(15)
    assert not thread.is_alive()


def test_a_fenced_write_of_a_handler_that_holds_its_lease_commits():
    registry = HandlerRegistry()

    @handler("f-holds", registry=registry)
    def holds(ctx: TaskContext) -> str:
        with ctx.fenced():
            User.objects.create(username=ctx.spec["name"])
        return "written"

    task = Task.objects.submit("f-holds", {"name": "alice"})
    worker, thread = run(registry, "f-holds")
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.COMPLETED, timeout=10)
    stop(worker, thread)
    assert User.objects.filter(username="alice").exists()


def test_a_handler_whose_lease_was_reset_commits_nothing_in_a_fenced_block():
    registry = HandlerRegistry()
    was_reset = threading.Event()
    raised: list[BaseException] = []

    @handler("f-reset", registry=registry)
    def late(ctx: TaskContext) -> str:
        assert was_reset.wait(10)
        try:
            with ctx.fenced():
                User.objects.create(username="bob")
        except LeaseLost as exc:
            raised.append(exc)
            raise
        return "written"

    task = Task.objects.submit("f-reset", {})
    worker, thread = run(registry, "f-reset")
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.RUNNING, what="leased")
    Task.objects.filter(pk=task.pk).update(not_before=Now() + timedelta(hours=1))  # no re-lease
    assert expire_and_reset(task) == 1
    was_reset.set()
    wait_until(lambda: not worker._slots.in_hand(), timeout=60, what="the handler to stop")
    stop(worker, thread)
    assert [type(exc) for exc in raised] == [LeaseLost]
    assert not User.objects.filter(username="bob").exists()
    assert Task.objects.get(pk=task.pk).status == Status.READY  # nothing written by the worker


def test_a_reset_waits_for_a_fenced_block_to_commit():
    """The row stays locked until the block commits: the write happens while the lease is
    held, and the reset after it."""
    registry = HandlerRegistry()
    inside, proceed = threading.Event(), threading.Event()

    @handler("f-slow", registry=registry)
    def slow(ctx: TaskContext) -> str:
        with ctx.fenced():
            User.objects.create(username="carol")
            inside.set()
            assert proceed.wait(10)
        return "written"

    task = Task.objects.submit("f-slow", {})
    worker, thread = run(registry, "f-slow")
    assert inside.wait(10)
    resets: list[int] = []
    sent = threading.Event()

    def reset() -> None:
        def noted(execute, sql, params, many, context):
            sent.set()
            return execute(sql, params, many, context)

        try:
            with connections["default"].execute_wrapper(noted):
                resets.append(expire_and_reset(task))
        finally:
            connections.close_all()

    resetter = threading.Thread(target=reset, daemon=True)
    resetter.start()
    assert sent.wait(30)
    # SQLite has one write lock, which the block holds: there the reset waits once it is sent.
    if connections["default"].vendor != "sqlite":
        wait_until(lambda: lock_waits() > 0, what="the reset to wait for the fenced block's lock")
    assert resetter.is_alive()  # waiting for the fenced block's lock
    proceed.set()
    resetter.join(25)
    assert resets in ([1], [0])  # reset, unless the task completed first
    wait_until(lambda: not worker._slots.in_hand(), timeout=60, what="the handler to finish")
    stop(worker, thread)
    assert User.objects.filter(username="carol").exists()


def test_fenced_outside_a_worker_refuses_a_task_it_does_not_hold():
    me = Worker.objects.register(["f-q"])
    other = Worker.objects.register(["f-q"])
    task = Task.objects.submit("f-q", {})
    [leased] = Task.objects.lease(other, ["f-q"])
    ctx = TaskContext(leased, me)
    with pytest.raises(LeaseLost), ctx.fenced():
        User.objects.create(username="dave")
    assert not User.objects.filter(username="dave").exists()
    assert ctx.stopped
    Task.objects.get(pk=task.pk).cancel()
