"""A worker's handler threads: the slots of plain handlers, one task at a time each.

A slot costs a thread only while a plain handler needs one: handler threads are started as
plain handlers' tasks arrive and no thread is idle, up to `concurrency` of them, and then kept
for the next ones. With `--isolation process` each thread runs its handlers in a child process
of its own (`isolation.py`). A thread writes its task's outcome through the sink on a
connection of its own, and runs at once the task that write leased, if any.

Handler threads are daemon threads: a handler that ignores `ctx.check()` cannot keep the
process alive after the grace period of a shutdown (its task was yielded already).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError

from ..durable import write_held_checkpoint
from ..exceptions import ScyllaError
from ..handlers import TaskContext
from ..resources import ThreadMeter
from .daemons import start_daemon
from .database import OwnConnections, close_handler_connections
from .isolation import ChildDied, Isolation
from .outcomes import HandlerRun, RunOutcomes

logger = logging.getLogger("scylla_django")


class _Abandoned(Exception):
    """The task a handler thread ran was given up by the watchdog: the thread ends (another
    took its place)."""


class HandlerThreads:
    """Runs the plain handlers of the tasks handed to `put()` on up to `concurrency` threads,
    one task at a time each (a thread is started when a task comes and none is idle), making
    their outcomes with `outcomes`.

    With `isolation`, each thread runs its handlers in a child process of its own. `after_task`
    is called on the handler's thread once each handler has run, before its outcome is written.
    """

    def __init__(
        self,
        outcomes: RunOutcomes,
        concurrency: int,
        using: str,
        *,
        isolation: Isolation | None = None,
        after_task: Callable[[], None] | None = None,
    ) -> None:
        self.outcomes = outcomes
        self.concurrency = concurrency
        self.isolation = isolation
        self._after_task = after_task
        self._own = OwnConnections(using)
        self._jobs: queue.SimpleQueue[TaskContext | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0  # handler threads started and not abandoned
        self._waiting = 0  # tasks put in `_jobs` that no thread has taken yet
        self._idle = 0  # handler threads waiting for a task
        self._started = 0  # handler threads ever started (their names' numbers)

    def put(self, ctx: TaskContext) -> None:
        """Hand a leased task to a handler thread (started if none is idle)."""
        with self._lock:
            self._waiting += 1
            self._jobs.put(ctx)
            self._grow()

    def stop(self) -> None:
        """Let each handler thread end once its task is done (no more tasks come); kill the
        child processes still running a task."""
        with self._lock:
            threads = self._threads
        for _ in range(threads):
            self._jobs.put(None)
        if self.isolation is not None:
            self.isolation.stop()

    def waiting(self) -> int:
        """Tasks put to the handler threads that no thread has taken yet."""
        with self._lock:
            return self._waiting

    def abandon(self) -> None:
        """Leave a handler thread to its handler (the watchdog ended its task): a thread cannot
        be killed, so another handler thread takes its place and it ends once its handler
        returns, if ever."""
        with self._lock:  # it no longer counts: another may start in its place
            self._threads -= 1
            self._grow()

    def _grow(self) -> None:
        """Start a handler thread if a task waits with no idle thread to take it, up to
        `concurrency` threads (the caller holds `_lock`)."""
        if self._waiting > self._idle and self._threads < self.concurrency:
            self._threads += 1
            start_daemon(self._thread_loop, f"scylla-task-{self._started}")
            self._started += 1

    def _next_job(self) -> TaskContext | None:
        """The next task for this handler thread (None: end the thread)."""
        with self._lock:
            self._idle += 1
        ctx = self._jobs.get()
        with self._lock:
            self._idle -= 1
            if ctx is not None:
                self._waiting -= 1
        return ctx

    def _thread_loop(self) -> None:
        try:
            ctx = self._next_job()
            while ctx is not None:
                try:
                    following = self.run(ctx)
                except _Abandoned:
                    return  # another thread took this one's place
                except Exception:  # a bug of ours: log it, give the task up, keep the thread
                    logger.exception("%s: running %s failed", self.outcomes.name(), ctx.task.rn)
                    self.outcomes.sink.give_up(ctx)
                    following = None
                ctx = following if following is not None else self._next_job()
        finally:
            self._own.close()
            if self.isolation is not None:
                self.isolation.close()

    def run(self, ctx: TaskContext) -> TaskContext | None:
        """Run `ctx`'s handler on this thread (or in its child process) and hand its outcome to
        the sink; return the next task this thread should run, if its outcome's write leased
        one."""
        outcomes = self.outcomes
        sink = outcomes.sink
        if ctx.stopped:  # prefetched, and cancelled, lost or yielded before its turn
            outcomes.log_stop(ctx, ctx.stop_reason)
            sink.hand_over(ctx, None)
            return None
        if sink.start_needs_writes(ctx) and not sink.write_before_start(ctx):
            outcomes.log_stop(ctx, ctx.stop_reason)
            sink.hand_over(ctx, None)
            return None
        if self.isolation is not None:
            self.isolation.ready()  # a child that cannot start is the worker's failure
        with outcomes.running(ctx, outcomes.traceparent(ctx)) as run:
            outcomes.upgrade(ctx)
            run.result = self._call(ctx, run)
        write_held_checkpoint(ctx)
        close_handler_connections()
        if self._after_task is not None:
            self._after_task()  # before the outcome's write, which may lease the next task
        if not ctx.end():
            raise _Abandoned
        with self._own.used():  # the outcome's and the log's writes, on this thread's own
            if isinstance(ctx.stop_reason, ChildDied):
                self._lapse(ctx)
            return sink.finish_here(ctx, outcomes.written(ctx, run))

    def _call(self, ctx: TaskContext, run: HandlerRun) -> Any:
        """Call the handler, in this thread's child process under isolation, recording what
        it used in `run.usage`."""
        if self.isolation is not None:
            cpu_limit = self.outcomes.registry.cpu_limit_of(ctx.task.queue)
            result = self.isolation.call(
                ctx,
                run.handler,
                run.record,
                cpu_limit=None if cpu_limit is None else cpu_limit.total_seconds(),
            )
            for child in ctx.children:  # spawned in the child process, outside the run's span
                if "batch" not in child:
                    ctx.trace_options(child)  # type: ignore[arg-type]
            return result
        meter = ThreadMeter()
        try:
            result = run.handler(ctx)
            if inspect.iscoroutine(result):  # not an `async def`, but returned a coroutine
                result = asyncio.run(result)
            return result
        finally:
            run.record(meter.usage())

    def _lapse(self, ctx: TaskContext) -> None:
        """Let the lease of `ctx`, whose child process died running it, lapse now: the monitor
        resets it as the lease of a dead worker (see `isolation.py`). The heartbeat no longer
        extends it (the task is stopped); should this write fail, or a heartbeat sent before
        the stop land after it, the lease lapses at its deadline instead, to the same end."""
        try:
            ctx.task.lapse_lease(ctx.worker)
        except (DatabaseError, ScyllaError) as exc:
            logger.warning(
                "%s: could not end the lease of %s at once: %s",
                self.outcomes.name(),
                ctx.task.rn,
                exc,
            )
