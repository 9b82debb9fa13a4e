"""`TaskContext`, what a handler gets: its task, spec and worker, progress, stops, children,
a logger kept in the task's log, and the durable steps, cursors, sleeps and waits (its base
`DurableContext`; the `Durable` of `scylla_django.durable` does their work)."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn, Unpack, cast

from .. import db, tracing
from ..exceptions import (
    Abort,
    InvalidTransition,
    LeaseLost,
    ScyllaError,
    Snooze,
    TaskCancelled,
    exception_error,
)
from ..lease_in_hand import LeaseInHand
from ..pending_checkpoint import PendingCheckpoint
from ..validation import validate_delay, validate_progress
from .durable_context import DurableContext

if TYPE_CHECKING:
    from ..models import Task, TaskOptions, Worker

# The logger of `ctx.logger`: what a handler logs there is kept in its task's log.
TASK_LOGGER = "scylla_django.task"


class TaskLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """`ctx.logger`: the `scylla_django.task` logger, each message prefixed with the task's rn."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self.extra['rn'] if self.extra else '?'}] {msg}", kwargs


class TaskContext(DurableContext):
    """What a handler gets: the task, its spec, the worker, progress and a stop check;
    `snooze()`, `spawn()` and `parent_results` (docs/howto/children.md); steps, a cursor,
    durable sleeps and waits (`docs/howto/durable.md`); and a logger whose records are kept
    in the task's log (docs/howto/task-logs.md)."""

    def __init__(self, task: Task, worker: Worker) -> None:
        self.task = task
        self.worker = worker
        self._progress = task.progress
        self._stop: ScyllaError | None = None
        self._lock = threading.Lock()
        self._ended = False
        self._wakers: set[Callable[[], None]] = set()  # what wakes a `sleep()` in progress
        self.in_hand = LeaseInHand(start_recorded=task.handler_started, sent_progress=task.progress)
        """What the worker keeps about the lease it holds for this run (`LeaseInHand`)."""
        # The children spawned so far, submitted with the task's completion (`spawn`).
        self.children: list[dict[str, Any]] = []
        self._parent_results: dict[str, Any] | None = None
        # In a bundle (docs/howto/bundle-handlers.md): the member's own outcome, once the bundle
        # handler decided it with `complete()` or `abort()`.
        self.bundled = False
        self.decision: tuple[Any, list[dict[str, Any]] | None] | None = None
        # The run's `process` span (scylla_django.tracing), and its traceparent: what the
        # children it spawns are traced under (None: no tracer configured).
        self.span: Any = None
        self.traceparent: str | None = None
        self.pending_checkpoint = PendingCheckpoint(self._lock, lambda: self._stop is not None)
        """The checkpoint waiting for the worker's next heartbeat (`checkpoint()`)."""

    @functools.cached_property
    def logger(self) -> TaskLogger:
        """The `scylla_django.task` logger, each message prefixed with the task's rn; what a
        handler logs there is kept in its task's log (made on first use: most handlers of a
        busy worker never log)."""
        return TaskLogger(logging.getLogger(TASK_LOGGER), {"rn": self.task.rn})

    @property
    def spec(self) -> Any:
        return self.task.spec

    @property
    def progress(self) -> float:
        return self._progress

    def set_progress(self, progress: float) -> None:
        """Record progress (0..1); it is sent with the next heartbeat."""
        self._progress = validate_progress(progress)

    def snooze(self, delay: timedelta | float | str | None = None) -> NoReturn:
        """End this run and put the task back to ready `delay` from now (seconds, a timedelta
        or text such as "5m"; None: what the handler's snooze policy says for the task's next
        snooze): raises `Snooze`. No attempt is spent (see `Task.snooze`)."""
        raise Snooze(None if delay is None else validate_delay(delay))

    def spawn(
        self, queue: str, spec: Any, *, now: bool = False, **options: Unpack[TaskOptions]
    ) -> str:
        """Submit a child of this task (`parent` = this task's rn); return the child's rn.

        The child is validated now (ValidationError) and submitted in the transaction that
        completes this task: a task that aborts, snoozes or loses its lease submits none. With
        `now=True` it is submitted at once instead, whatever becomes of this task (then the rn
        returned is that of the task `submit()` returned: with a held unique key, the holder).
        `options` are `submit()`'s (`priority`, `rn`, `not_before`, `unique_key`, ...).
        """
        from ..models import Task, new_rn

        using = self.task._state.db or "default"
        options["parent"] = self.task.rn
        self.trace_options(options)
        if now:
            child = Task.objects.using(using).submit(queue, spec, **options)
            return child.rn
        rn = options.get("rn") or new_rn()
        options["rn"] = rn
        Task.build(queue, spec, **options)  # bad input is the handler's error, raised here
        self.children.append({"queue": queue, "spec": spec, **options})
        return rn

    def batch(
        self,
        *,
        on_success: object = None,
        on_complete: object = None,
        on_failure: object = None,
    ) -> SpawnedBatch:
        """Open a batch of children (docs/howto/batches.md), written with this task's completion
        as `spawn()`'s children are: the batch, its callbacks and its tasks, or nothing if
        this task does not complete. Callbacks are as `Batch`'s, validated now
        (ValidationError). Used as a context manager, a block left by an exception drops the
        batch."""
        from ..batches import validate_callback

        using = self.task._state.db or "default"
        callbacks: dict[str, Any] = {}
        given = {"on_success": on_success, "on_complete": on_complete, "on_failure": on_failure}
        for kind, value in given.items():
            callback = validate_callback(kind, value, using)
            if callback is not None:
                options = cast("TaskOptions", {**callback.options, "parent": self.task.rn})
                self.trace_options(options)
                callbacks[kind] = {
                    "queue": callback.queue,
                    "spec": callback.spec,
                    "options": options,
                }
        batch = SpawnedBatch(self, callbacks)
        self.children.append(batch.entry)
        return batch

    def trace_options(self, options: TaskOptions) -> None:
        """Give the `options` of a task this run submits the run's traceparent, unless they
        name one (that of the span current in the handler, else of the run's own span)."""
        if options.get("traceparent") is None:
            traceparent = tracing.current_traceparent() or self.traceparent
            if traceparent is not None:
                options["traceparent"] = traceparent

    @property
    def parent_results(self) -> dict[str, Any]:
        """The results of the tasks this follow-up waited for (`submit(after=[...])`), by the
        rn it named: `{rn: result}`. Read once, in one query, when first asked; a parent
        that was retried gives the result of the attempt that completed. Empty for a task
        submitted without `after`."""
        if self._parent_results is None:
            from ..followups import parent_results

            self._parent_results = parent_results(self.task)
        return self._parent_results

    def check(self) -> None:
        """Raise if the handler should stop: TaskCancelled, LeaseLost, WorkerStopping or
        TaskTimedOut.

        Call it between steps of long work. The worker writes nothing more for a stopped task
        (but the abort `timeout` for one that timed out). LeaseLost is raised too once the
        lease may have expired because heartbeats failed (`in_hand.lease_kept_until` has
        passed).
        """
        kept = self.in_hand.lease_kept_until
        if kept is not None and time.monotonic() >= kept:
            self.stop(
                LeaseLost(
                    "heartbeats failed and the lease may expire: giving the task up",
                    rn=self.task.rn,
                )
            )
        with self._lock:
            if self._stop is not None:
                raise self._stop

    async def sleep(self, seconds: float) -> None:
        """`await asyncio.sleep(seconds)` that ends as soon as the handler should stop: then,
        and before sleeping, it raises as `check()` does (for an `async def` handler).

        A handler that waits this way holds its task without a thread and without waking up
        to check: a cancel, a lost lease, a timeout or the worker's shutdown reaches it within
        the heartbeat that learns of it.
        """
        self.check()
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        def wake_threadsafe() -> None:
            loop.call_soon_threadsafe(wake)

        with self._lock:
            stopped = self._stop is not None
            if not stopped:
                self._wakers.add(wake_threadsafe)
        if not stopped:
            timer = loop.call_later(max(0.0, seconds), wake)
            try:
                await woken
            finally:
                timer.cancel()
                with self._lock:
                    self._wakers.discard(wake_threadsafe)
        self.check()

    @contextmanager
    def fenced(self) -> Iterator[None]:
        """A transaction on the task's database in which the handler's own writes commit only
        while this worker still holds the task's lease (docs/howto/fenced-effects.md).

        It begins by locking the task's row on its current owner and lease number (one
        `SELECT … FOR SHARE` on PostgreSQL, the write lock on SQLite) and keeps the lock until
        it commits: a reset, a takeover or a cancel waits for it. If the lease was already
        reset or taken over, LeaseLost is raised (TaskCancelled if the task was cancelled)
        and nothing in the block is committed; the task is stopped too, so that `check()`
        raises from then on. Keep the block short: the lease's heartbeat waits for it.
        """
        using = self.task._state.db or "default"
        try:
            with db.write_atomic(using):
                self.task.lock_lease(self.worker)
                yield
        except InvalidTransition as exc:
            if exc.rn == self.task.rn and exc.code in (LeaseLost.code, TaskCancelled.code):
                self.stop(exc)
            raise

    def complete(self, result: Any = None) -> None:
        """In a bundle handler: complete this member with `result` (JSON), whatever happens to
        the rest of the bundle. A member is decided once: a later `complete()` or `abort()` is
        a RuntimeError."""
        self._decide((result, None))

    def abort(self, reason: BaseException) -> None:
        """In a bundle handler: abort this member with `reason`, an `Abort` (its code) or any
        exception (the error `exception`, retried as a handler's raise is)."""
        if isinstance(reason, Abort):
            errors = [reason.as_error()]
        elif isinstance(reason, BaseException):
            errors = [exception_error(reason)]
        else:
            raise TypeError(f"abort() takes an Abort or an exception, not {reason!r}")
        self._decide((None, errors))

    def _decide(self, decision: tuple[Any, list[dict[str, Any]] | None]) -> None:
        if not self.bundled:
            raise RuntimeError(
                "complete() and abort() decide a member of a bundle; a plain handler returns "
                "its result or raises"
            )
        with self._lock:
            if self.decision is not None:
                raise RuntimeError(f"{self.task.rn} was decided already")
            self.decision = decision

    @property
    def stop_reason(self) -> ScyllaError | None:
        """Why the handler should stop, if it should."""
        return self._stop

    def end(self) -> bool:
        """Claim the right to end this task (write its outcome, or give it up): True for the
        first caller only, so a handler returning late and the worker that gave it up never
        both end it."""
        with self._lock:
            if self._ended:
                return False
            self._ended = True
            return True

    @property
    def stopped(self) -> bool:
        return self._stop is not None

    def stop(self, reason: ScyllaError) -> None:
        """Tell the handler to stop: `check()` raises `reason` from now on, and a `sleep()`
        in progress ends at once (the first reason given is kept)."""
        with self._lock:
            if self._stop is not None:
                return
            self._stop = reason
            wakers = list(self._wakers)
        for wake in wakers:
            # RuntimeError: its event loop is closed, so nothing sleeps on it any more.
            with suppress(RuntimeError):
                wake()

    def __repr__(self) -> str:
        return f"<TaskContext {self.task.rn} on {self.worker.name}>"


class SpawnedBatch:
    """A batch a handler opened (`ctx.batch()`): `submit()` adds a task to it; all of it is
    written with the handler's task's completion."""

    def __init__(self, ctx: TaskContext, callbacks: dict[str, Any]) -> None:
        self.ctx = ctx
        self.tasks: list[dict[str, Any]] = []
        self.entry: dict[str, Any] = {"batch": {"callbacks": callbacks, "tasks": self.tasks}}

    def submit(self, queue: str, spec: Any, **options: Unpack[TaskOptions]) -> str:
        """Add a task to the batch (`submit()`'s options, validated now: ValidationError);
        its `parent` is the handler's task. Return its rn."""
        from ..models import Task, new_rn

        options["parent"] = self.ctx.task.rn
        options["rn"] = options.get("rn") or new_rn()
        self.ctx.trace_options(options)
        Task.build(queue, spec, **options)
        self.tasks.append({"queue": queue, "spec": spec, **options})
        return str(options["rn"])

    def __enter__(self) -> SpawnedBatch:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        if exc_type is not None and self.entry in self.ctx.children:
            self.ctx.children.remove(self.entry)
