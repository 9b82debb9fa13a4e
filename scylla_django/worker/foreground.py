"""One task run in the foreground, on the caller's thread: `manage.py scylla_run RN` (a debug
run), `scylla_django.testing.run_task()` and the eager mode.

The task is leased by hand (`TaskQuerySet.lease_rn`) by a worker registered for the run (its
host reads "(scylla_run)"), so the handler's `ctx.fenced()` blocks and its heartbeats are
fenced on that lease as under `scylla_worker`; its outcome is written as a worker writes it
(`finish_many`, with the retry policies). With `dry_run` all of it happens in one transaction
that is rolled back: the database is left as it was. The run-time limit is not enforced here
(a debugger may stop the handler for as long as it likes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import transaction

from ..exceptions import (
    Abort,
    LeaseLost,
    ScyllaError,
    TaskCancelled,
    TaskTimedOut,
    WorkerStopping,
    exception_error,
)
from ..handlers import HandlerRegistry, TaskContext
from ..handlers import registry as default_registry
from ..models import Outcome, Task, Worker
from ..validation import invalid_result, validate_json
from .database import WorkerConnection
from .heartbeat import Heartbeat
from .options import WorkerOptions

logger = logging.getLogger("scylla_django")

# What the host of a worker registered for one run says besides the host name.
RUN_HOST = "(scylla_run)"


class NoHandler(ScyllaError, code="no_handler"):
    """No handler is registered in this process for the task's queue."""


@dataclasses.dataclass
class ForegroundRun:
    """How a foreground run ended: the task as it was left (`dry_run`: as it would have been),
    its outcome (None if the handler was stopped), the exception the handler raised, if any,
    and whether the outcome was written."""

    task: Task
    outcome: Outcome | None
    exception: BaseException | None = None
    written: bool = False


def run_task(
    rn: str,
    *,
    using: str = "default",
    registry: HandlerRegistry = default_registry,
    dry_run: bool = False,
    heartbeat: bool = True,
    lease_length: timedelta | None = None,
    post_mortem: Callable[[BaseException], None] | None = None,
) -> ForegroundRun:
    """Lease the ready task `rn`, run its handler here and write its outcome.

    `post_mortem(exc)` is called with what the handler raised, before its outcome is written
    (a debugger's post-mortem). `heartbeat` keeps the lease alive from a thread while the
    handler runs (not in a `dry_run`, whose lease no other connection can see).

    Raises TaskNotFound, InvalidTransition (the task is not ready, or waits for its parents),
    NoHandler.
    """
    task = Task.objects.using(using).get_by_rn(rn)
    if registry.get(task.queue) is None:
        raise NoHandler(f"No handler is registered for queue {task.queue!r} of task {rn}.", rn=rn)
    if not dry_run:
        return _run(rn, task.queue, using, registry, heartbeat, lease_length, post_mortem)
    with transaction.atomic(using=using):
        run = _run(rn, task.queue, using, registry, False, lease_length, post_mortem)
        transaction.set_rollback(True, using=using)
    return run


def _run(
    rn: str,
    queue: str,
    using: str,
    registry: HandlerRegistry,
    heartbeat: bool,
    lease_length: timedelta | None,
    post_mortem: Callable[[BaseException], None] | None,
) -> ForegroundRun:
    options = WorkerOptions([queue], registry=registry, using=using, listen=False)
    if lease_length is not None:
        options = dataclasses.replace(options, lease_length=lease_length)
    worker = Worker.objects.db_manager(using).register(
        [queue],
        hostname=f"{socket.gethostname()} {RUN_HOST}"[:255],
        pid=os.getpid(),
        heartbeat_interval=options.heartbeat_seconds,
        lease_length=options.lease_length,
    )
    try:
        task = Task.objects.using(using).lease_rn(worker, rn, lease_length=options.lease_length)
        ctx = TaskContext(task, worker)
        ctx.timeout = registry.timeout_of(task)
        logger.info("%s leased %s (queue %s)", worker.name, rn, queue)
        connection = WorkerConnection(using)
        beat = (
            Heartbeat(options, worker, lambda: [ctx], lambda: None, connection)
            if heartbeat
            else None
        )
        thread = None
        if beat is not None:
            thread = threading.Thread(target=beat.run, name="scylla-heartbeat", daemon=True)
            thread.start()
        try:
            run = _execute(ctx, registry, post_mortem)
        finally:
            if beat is not None and thread is not None:
                beat.close()
                thread.join(10)
            connection.close()
        if run.outcome is not None:
            written = Task.objects.using(using).finish_many(worker, [run.outcome])
            run.written = task.pk in written
        run.task = Task.objects.using(using).get(pk=task.pk)
        return run
    finally:
        worker.stop()


def _execute(
    ctx: TaskContext,
    registry: HandlerRegistry,
    post_mortem: Callable[[BaseException], None] | None,
) -> ForegroundRun:
    """Run `ctx`'s handler on this thread: its outcome, as a worker would write it."""
    task = ctx.task
    handler = registry.get(task.queue)
    assert handler is not None, "checked before leasing"
    ctx.handler_running = True
    try:
        result = handler(ctx)
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
    except BaseException as exc:  # the handler's, whatever it is: its task's outcome
        if post_mortem is not None:
            post_mortem(exc)
        return ForegroundRun(task, _raised(ctx, exc), exc)
    finally:
        ctx.handler_running = False
    try:
        value = validate_json(result, "result", allow_null=True)
    except ValidationError as exc:
        outcome = Outcome(task.pk, task.leases, errors=[invalid_result(exc)], task=task)
        return ForegroundRun(task, outcome)
    return ForegroundRun(task, Outcome(task.pk, task.leases, value, task=task))


def _raised(ctx: TaskContext, exc: BaseException) -> Outcome | None:
    task = ctx.task
    if isinstance(exc, TaskTimedOut | Abort):
        return Outcome(task.pk, task.leases, errors=[exc.as_error()], task=task)
    if isinstance(exc, TaskCancelled | LeaseLost | WorkerStopping):
        logger.info("%s was stopped: %s", task.rn, exc)
        return None
    return Outcome(task.pk, task.leases, errors=[exception_error(exc)], task=task)
