"""Running handlers: a thread per slot for plain handlers, one event loop thread for `async
def` ones, and what a handler's return or raise becomes (an `Outcome`, or none for a task
that was stopped).

Handler threads are daemon threads: a handler that ignores `ctx.check()` cannot keep the
process alive after the grace period of a shutdown (its task was yielded already).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from django.core.exceptions import ValidationError

from ..exceptions import (
    Abort,
    LeaseLost,
    TaskCancelled,
    WorkerStopping,
    error_record,
    exception_error,
)
from ..handlers import HandlerRegistry, TaskContext
from ..models import Outcome, Task
from ..validation import validate_json
from .database import OwnConnections, close_handler_connections

logger = logging.getLogger("scylla_django")


class OutcomeSink(Protocol):
    """Where a handler's outcome goes once it has run (the outcome writer)."""

    def finish_here(self, ctx: TaskContext, outcome: Outcome | None) -> TaskContext | None:
        """On the handler's thread: end `ctx`; return a task this thread runs next, if any."""

    def hand_over(self, ctx: TaskContext, outcome: Outcome | None) -> None:
        """From the event loop: end `ctx` later, on another thread."""

    def give_up(self, ctx: TaskContext) -> None:
        """Free `ctx`'s slot after a failure of the worker's own (its outcome is lost)."""


@dataclasses.dataclass
class _Run:
    """A handler's run in `Execution._running()`."""

    handler: Callable[[TaskContext], Any]
    result: Any = None
    outcome: Outcome | None = None


class Execution:
    """Runs the handlers of `registry` for the tasks handed to `dispatch()`: on `concurrency`
    threads, one task at a time each, or on the event loop (started only when a queue of
    `queues` has an `async def` handler), as many at once as are handed to it."""

    def __init__(
        self,
        registry: HandlerRegistry,
        queues: Sequence[str],
        concurrency: int,
        using: str,
        name: Callable[[], str],
    ) -> None:
        self.registry = registry
        self.queues = list(queues)
        self.concurrency = concurrency
        self._name = name
        self._own = OwnConnections(using)
        self._jobs: queue.SimpleQueue[TaskContext | None] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turns: asyncio.Semaphore | None = None  # made on the event loop
        self._sink: OutcomeSink | None = None

    def start(self, sink: OutcomeSink) -> None:
        """Start the handler threads (and the event loop), sending outcomes to `sink`."""
        self._sink = sink
        for number in range(self.concurrency):
            start_daemon(self._thread_loop, f"scylla-task-{number}")
        if any(inspect.iscoroutinefunction(self.registry.get(q)) for q in self.queues):
            self._loop = asyncio.new_event_loop()
            start_daemon(self._loop.run_forever, "scylla-async")

    def stop(self) -> None:
        """Let each handler thread end once its task is done (no more tasks come)."""
        for _ in range(self.concurrency):
            self._jobs.put(None)

    def stop_loop(self) -> None:
        """Stop the event loop, if there is one."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def runs_on_loop(self, ctx: TaskContext) -> bool:
        """Whether `ctx`'s handler is an `async def` run on the event loop."""
        return self._loop is not None and inspect.iscoroutinefunction(
            self.registry.get(ctx.task.queue)
        )

    def dispatch(self, ctx: TaskContext) -> None:
        """Hand a leased task to a handler thread, or to the event loop."""
        if self._loop is not None and self.runs_on_loop(ctx):
            asyncio.run_coroutine_threadsafe(self._execute_async(ctx), self._loop)
        else:
            self._jobs.put(ctx)

    @property
    def sink(self) -> OutcomeSink:
        assert self._sink is not None, "the handlers are not started yet"
        return self._sink

    # -- threads ----------------------------------------------------------------------------

    def _thread_loop(self) -> None:
        try:
            ctx = self._jobs.get()
            while ctx is not None:
                try:
                    following = self._execute(ctx)
                except Exception:  # a bug of ours: log it, give the task up, keep the thread
                    logger.exception("%s: running %s failed", self._name(), ctx.task.rn)
                    self.sink.give_up(ctx)
                    following = None
                ctx = following if following is not None else self._jobs.get()
        finally:
            self._own.close()

    def _execute(self, ctx: TaskContext) -> TaskContext | None:
        """Run `ctx`'s handler on this thread; return the next task this thread should run,
        if its outcome's write leased one."""
        if ctx.stopped:  # prefetched, and cancelled, lost or yielded before its turn
            self.sink.hand_over(ctx, None)
            return None
        with self._running(ctx) as run:
            run.result = run.handler(ctx)
        close_handler_connections()  # the handler's own queries: as at the end of a request
        with self._own.used():
            return self.sink.finish_here(ctx, self._kept(ctx, run.outcome))

    async def _execute_async(self, ctx: TaskContext) -> None:
        """An `async def` handler, on the event loop thread: up to `concurrency` at once there
        (the prefetched ones wait their turn)."""
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.concurrency)
        async with self._turns:
            if ctx.stopped:  # prefetched, and cancelled, lost or yielded before its turn
                self.sink.hand_over(ctx, None)
                return
            with self._running(ctx) as run:
                run.result = await run.handler(ctx)
        try:
            self.sink.hand_over(ctx, self._kept(ctx, run.outcome))
        except Exception:  # a bug of ours: log it, give the task up
            logger.exception("%s: running %s failed", self._name(), ctx.task.rn)
            self.sink.give_up(ctx)

    # -- outcomes ---------------------------------------------------------------------------

    @contextmanager
    def _running(self, ctx: TaskContext) -> Iterator[_Run]:
        """Run the handler of `ctx` in the block (`run.result = run.handler(ctx)`, or awaited);
        afterwards `run.outcome` is what it returned or raised, timed.

        Whatever the handler raises is its outcome, never ours: SystemExit, KeyboardInterrupt,
        and asyncio.CancelledError too.
        """
        handler = self.registry.get(ctx.task.queue)
        assert handler is not None, "leased a task of a queue without a handler"
        run = _Run(handler)
        outcome: Outcome | None
        ctx.handler_running = True
        started = time.monotonic()
        try:
            yield run
            outcome = self._returned(ctx, run.result)
        except BaseException as exc:
            outcome = self._raised(ctx, exc)
        finally:
            ctx.handler_running = False
        run.outcome = _timed(outcome, ctx.task, started)

    def _returned(self, ctx: TaskContext, result: Any) -> Outcome:
        task = ctx.task
        try:
            return Outcome(task.pk, task.leases, validate_json(result, "result", allow_null=True))
        except ValidationError as exc:  # a result that is not JSON, or too large
            logger.warning("%s: the result of %s was rejected: %s", self._name(), task.rn, exc)
            error = error_record("invalid_result", str(exc)[:500])
            return Outcome(task.pk, task.leases, errors=[error])

    def _raised(self, ctx: TaskContext, exc: BaseException) -> Outcome | None:
        task = ctx.task
        if isinstance(exc, TaskCancelled | LeaseLost | WorkerStopping):
            logger.info("%s stopped %s: %s", self._name(), task.rn, exc)
            return None
        if isinstance(exc, Abort):
            return Outcome(task.pk, task.leases, errors=[exc.as_error()])
        logger.warning("%s: handler of %s raised %r", self._name(), task.rn, exc)
        return Outcome(task.pk, task.leases, errors=[exception_error(exc)])

    def _kept(self, ctx: TaskContext, outcome: Outcome | None) -> Outcome | None:
        """The outcome to write: none for a task stopped while its handler ran."""
        if outcome is not None and ctx.stopped and not ctx.yielded:
            logger.info("%s: %s was stopped; its outcome is not written", self._name(), ctx.task.rn)
            return None
        return outcome


def start_daemon(target: Callable[[], None], name: str) -> threading.Thread:
    """Start `target` on a daemon thread named `name`."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def _timed(outcome: Outcome | None, task: Task, started: float) -> Outcome | None:
    """`outcome` with the seconds since `started` (the handler's run time) and its task."""
    if outcome is None:
        return None
    return dataclasses.replace(outcome, duration=time.monotonic() - started, task=task)
