"""Checkpoints under a worker ride its heartbeat: `ctx.checkpoint(cursor)` writes nothing on the
handler's connection; the next heartbeat writes the last cursor, in its own statement on
PostgreSQL, fenced on the lease. `ctx.checkpoint(cursor, now=True)` commits at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.db.backends.signals import connection_created
from django.test.utils import CaptureQueriesContext

from scylla_django import Fixed, Retry
from scylla_django.enums import Status
from scylla_django.handlers import HandlerRegistry, TaskContext, handler
from scylla_django.models import Step, Task
from scylla_django.worker import TaskWorker, WorkerOptions
from tests.helpers import start_worker, stop_worker

pytestmark = pytest.mark.django_db(transaction=True)

CHECKPOINTS = 200


@contextmanager
def statements_by_thread() -> Iterator[list[tuple[str, str]]]:
    """Every statement that a connection opened in the block runs: (thread name, SQL)."""
    seen: list[tuple[str, str]] = []

    def wrapper(execute, sql, params, many, context):
        seen.append((threading.current_thread().name, sql))
        return execute(sql, params, many, context)

    def opened(sender, connection, **kwargs) -> None:
        connection.execute_wrappers.append(wrapper)

    connection_created.connect(opened)
    try:
        yield seen
    finally:
        connection_created.disconnect(opened)


def cursor_of(task: Task) -> object:
    step = Step.objects.filter(task=task, name="@cursor").first()
    return None if step is None else step.result


@pytest.mark.parametrize("now", [False, True])
def test_checkpoints_ride_the_next_heartbeat_unless_asked_to_commit_now(now):
    registry = HandlerRegistry()
    looped, release = threading.Event(), threading.Event()
    counted: list[int] = []

    @handler("ck-loop", registry=registry)
    def loop(ctx: TaskContext) -> int:
        start = ctx.cursor or 0  # read once: the run's recorded steps
        with CaptureQueriesContext(connection) as queries:
            for row in range(start, start + CHECKPOINTS):
                ctx.checkpoint(row + 1, now=now)
        assert ctx.cursor == start + CHECKPOINTS  # read back at once, written or not
        counted.append(len(queries))
        looped.set()
        release.wait(60)
        return ctx.cursor

    worker = TaskWorker(
        WorkerOptions(
            ["ck-loop"],
            registry=registry,
            poll_interval=0.05,
            heartbeat_interval=0.2,
            lease_length=timedelta(minutes=10),
        )
    )
    hooks = worker.hooks
    with statements_by_thread() as seen:
        thread = start_worker(worker)
        try:
            task = Task.objects.submit("ck-loop", {})
            assert looped.wait(60)
            beats = hooks.count("beat")
            assert hooks.wait_for("beat", beats + 2), hooks
            # Written by the heartbeat while the handler still runs.
            assert cursor_of(task) == CHECKPOINTS
            assert Step.objects.get(task=task, name="@cursor").lease == 1
            release.set()
            assert hooks.wait_for("written", 1), hooks
        finally:
            release.set()
            stop_worker(worker, thread)
    assert Task.objects.get(pk=task.pk).status == Status.COMPLETED
    [handler_statements] = counted
    if now:  # a fenced transaction each: at least its lock and its write
        assert handler_statements >= 2 * CHECKPOINTS
        return
    assert handler_statements == 0
    # The heartbeat thread wrote the cursor, a few times, not once per checkpoint: inside its
    # statement on PostgreSQL, an update (and an insert, the first time) elsewhere.
    heartbeat = [sql for name, sql in seen if name == "scylla-heartbeat"]
    writes = [sql for sql in heartbeat if "scylla_django_step" in sql]
    assert 1 <= len(writes) <= CHECKPOINTS // 10, writes
    if connection.vendor == "postgresql":
        # In the heartbeat's own statement: the lease extended and the cursor written at once.
        assert all('UPDATE "scylla_django_task"' in sql for sql in writes), writes
        assert not [sql for sql in heartbeat if "scylla_django_step" in sql and "WITH" not in sql]


def test_a_checkpoint_kept_for_the_heartbeat_is_written_when_the_handler_raises():
    """A run that ends before the next heartbeat still leaves its last checkpoint: the retry
    that resumes takes the loop up from it."""
    registry = HandlerRegistry()
    starts: list[int] = []

    @handler(
        "ck-raise", registry=registry, retry=Retry(max_attempts=2, backoff=Fixed(0), resume=True)
    )
    def failing(ctx: TaskContext) -> int:
        start = ctx.cursor or 0
        starts.append(start)
        for row in range(start, 10):
            ctx.checkpoint(row + 1)
            if row == 6 and ctx.task.attempt == 1:
                raise RuntimeError("after the checkpoint of row 6")
        return ctx.cursor

    worker = TaskWorker(
        WorkerOptions(
            ["ck-raise"],
            registry=registry,
            poll_interval=0.05,
            heartbeat_interval=600,  # no heartbeat before the run ends
            lease_length=timedelta(minutes=20),
        )
    )
    hooks = worker.hooks
    thread = start_worker(worker)
    try:
        task = Task.objects.submit("ck-raise", {})
        assert hooks.wait_for("written", 2), hooks
    finally:
        stop_worker(worker, thread)
    assert Task.objects.get(pk=task.pk).status == Status.ABORTED
    retry = Task.objects.get(retry_of=task.rn)
    assert retry.status == Status.COMPLETED and retry.result == 10
    assert starts == [0, 7]
