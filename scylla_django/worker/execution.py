"""Running handlers, from the handler's call to its task's outcome: plain handlers on handler
threads, `async def` ones as coroutines on one event loop thread, bundle handlers on the thread
of their queue's bundler, and what a handler's return or raise becomes (an `Outcome`, or none
for a task that was stopped), with its log and what the run used.

The same code runs a task in the foreground (`foreground.py`: `scylla_run`, the testing
helpers, the eager mode), on the caller's thread and connection: `Execution.run()` and
`Execution.run_bundle()`, with the outcomes handed to a writer of the run's own.

A slot costs a thread only while a plain handler needs one: handler threads are started as
plain handlers' tasks arrive and no thread is idle, up to `concurrency` of them, and then
kept for the next ones. An `async def` handler's slot is a coroutine on the event loop (an
asyncio task): a worker whose handlers are all `async def` holds any number of slots with
its few threads of its own (the lease loop, the writer, the heartbeat, the watchdog, the
listener, the event loop).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from django.core.exceptions import ValidationError
from django.db import DatabaseError, connections

from .. import logs, spec_versions, tracing
from ..capture import TaskLog, captured
from ..durable import write_held_checkpoint
from ..exceptions import (
    Abort,
    LeaseLost,
    Parked,
    ScyllaError,
    Snooze,
    TaskCancelled,
    TaskTimedOut,
    WorkerStopping,
    error_record,
    exception_error,
)
from ..handlers import HandlerRegistry, TaskContext, apart
from ..models import Outcome, Task, traces
from ..resources import ThreadMeter, Usage
from ..validation import invalid_result, validate_delay, validate_json
from .database import OwnConnections, close_handler_connections
from .hooks import WorkerHooks
from .isolation import ChildDied, Isolation, Relayed

logger = logging.getLogger("scylla_django")


STOPS = (TaskCancelled, LeaseLost, WorkerStopping, Parked)
"""What a handler raises when it was told to stop (or parked its task itself, which ended the
lease): no outcome is written for its run."""


class _Abandoned(Exception):
    """The task a handler thread ran was given up by the watchdog: the thread ends (another
    took its place)."""


class OutcomeSink(Protocol):
    """Where a handler's outcome goes once it has run (the outcome writer)."""

    def finish_here(self, ctx: TaskContext, outcome: Outcome | None) -> TaskContext | None:
        """On the handler's thread: end `ctx`; return a task this thread runs next, if any."""

    def hand_over(self, ctx: TaskContext, outcome: Outcome | None) -> None:
        """From the event loop: end `ctx` later, on another thread."""

    def give_up(self, ctx: TaskContext) -> None:
        """Free `ctx`'s slot after a failure of the worker's own (its outcome is lost)."""

    def start_needs_writes(self, ctx: TaskContext) -> bool:
        """Whether something must be written before `ctx`'s handler starts (a quick look, on
        the thread about to run it): see `write_before_start`."""

    def write_before_start(self, ctx: TaskContext) -> bool:
        """On the thread about to run `ctx`'s handler, write what must be written first (the
        outcomes whose starts the database knows, the start of a task whose earlier lease
        expired unstarted); whether the handler may run (if not, `ctx` was stopped)."""


@dataclasses.dataclass
class _Run:
    """A handler's run in `Execution._running()`."""

    handler: Callable[[TaskContext], Any]
    result: Any = None
    outcome: Outcome | None = None
    usage: Usage | None = None

    def record(self, usage: Usage) -> None:
        self.usage = usage

    log: TaskLog | None = None


class Execution:
    """Runs the handlers of `registry` for the tasks handed to `dispatch()`: plain handlers on
    up to `concurrency` threads, one task at a time each (a thread is started when a task
    comes and none is idle), `async def` ones on the event loop (started only when a queue of
    `queues` has an `async def` handler), up to `concurrency` at once, without a thread each.
    `run_bundle()` runs a bundle handler on the calling thread (a bundler's).

    With `isolation`, each thread runs its plain handlers in a child process of its own (see
    `isolation.py`). `after_task` is called on the handler's thread once each handler has
    run, before its outcome is written.

    A `foreground` execution runs its tasks on the calling thread instead (`run()`, an
    `async def` handler in an event loop of its own), on that thread's connection, left open
    (a dry run's transaction, a test's): its handlers cannot be left to themselves, so the
    watchdog waits for a handler that runs on past its stop. `post_mortem(exc)` is called with
    what a handler raised (not a stop) before its outcome is made (a debugger's post-mortem).
    Without `keep_logs` the tasks' logs are captured but not stored (a dry run: the storage is
    not rolled back with the database).
    """

    def __init__(
        self,
        registry: HandlerRegistry,
        queues: Sequence[str],
        concurrency: int,
        using: str,
        name: Callable[[], str],
        *,
        isolation: Isolation | None = None,
        after_task: Callable[[], None] | None = None,
        foreground: bool = False,
        post_mortem: Callable[[BaseException], None] | None = None,
        keep_logs: bool = True,
        hooks: WorkerHooks | None = None,
    ) -> None:
        self.registry = registry
        self.hooks = hooks if hooks is not None else WorkerHooks()
        self.isolation = isolation
        self.foreground = foreground
        self.keep_logs = keep_logs
        self._after_task = after_task
        self._post_mortem = post_mortem
        self.queues = list(queues)
        self.concurrency = concurrency
        self._name = name
        self._own = OwnConnections(using)
        self._jobs: queue.SimpleQueue[TaskContext | None] = queue.SimpleQueue()
        self._threads_lock = threading.Lock()
        self._threads = 0  # handler threads started and not abandoned
        self._waiting = 0  # tasks put in `_jobs` that no thread has taken yet
        self._idle = 0  # handler threads waiting for a task
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turns: asyncio.Semaphore | None = None  # made on the event loop
        self._sink: OutcomeSink | None = None
        self._futures: dict[int, Future[None]] = {}  # the async handlers running, by task pk
        self._started = 0  # handler threads ever started (their names' numbers)

    def start(self, sink: OutcomeSink) -> None:
        """Get ready to run handlers (start the event loop, if any handler is `async def`),
        sending outcomes to `sink`. Handler threads start as plain handlers' tasks come."""
        self._sink = sink
        if self.foreground:
            return  # its `async def` handlers run in an event loop of their own, on its thread
        if any(inspect.iscoroutinefunction(self.registry.get(q)) for q in self.queues):
            self._loop = asyncio.new_event_loop()
            start_daemon(self._loop.run_forever, "scylla-async")

    def stop(self) -> None:
        """Let each handler thread end once its task is done (no more tasks come); kill the
        child processes still running a task."""
        with self._threads_lock:
            threads = self._threads
        for _ in range(threads):
            self._jobs.put(None)
        if self.isolation is not None:
            self.isolation.stop()

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
            future = asyncio.run_coroutine_threadsafe(self._execute_async(ctx), self._loop)
            self._futures[ctx.task.pk] = future
            future.add_done_callback(lambda _: self._futures.pop(ctx.task.pk, None))
        else:
            with self._threads_lock:
                self._waiting += 1
                self._jobs.put(ctx)
                self._grow()

    def waiting(self) -> int:
        """Tasks dispatched to the handler threads that no thread has taken yet."""
        with self._threads_lock:
            return self._waiting

    def threads(self) -> int:
        """The handler threads started and not abandoned."""
        with self._threads_lock:
            return self._threads

    def _grow(self) -> None:
        """Start a handler thread if a task waits with no idle thread to take it, up to
        `concurrency` threads (the caller holds `_threads_lock`)."""
        if self._waiting > self._idle and self._threads < self.concurrency:
            self._threads += 1
            start_daemon(self._thread_loop, f"scylla-task-{self._started}")
            self._started += 1

    def _next_job(self) -> TaskContext | None:
        """The next task for this handler thread (None: end the thread)."""
        with self._threads_lock:
            self._idle += 1
        ctx = self._jobs.get()
        with self._threads_lock:
            self._idle -= 1
            if ctx is not None:
                self._waiting -= 1
        return ctx

    def abandon(self, ctx: TaskContext) -> None:
        """Leave `ctx`'s handler to itself (the watchdog ended its task): an `async def` one is
        cancelled; a thread cannot be killed, so another handler thread takes its place and it
        ends once its handler returns, if ever."""
        future = self._futures.get(ctx.task.pk)
        if future is not None:
            future.cancel()
            return
        with self._threads_lock:  # it no longer counts: another may start in its place
            self._threads -= 1
            self._grow()

    @property
    def sink(self) -> OutcomeSink:
        if self._sink is None:
            raise RuntimeError("the handlers are not started yet")
        return self._sink

    # -- threads ----------------------------------------------------------------------------

    def _thread_loop(self) -> None:
        try:
            ctx = self._next_job()
            while ctx is not None:
                try:
                    following = self.run(ctx)
                except _Abandoned:
                    return  # another thread took this one's place
                except Exception:  # a bug of ours: log it, give the task up, keep the thread
                    logger.exception("%s: running %s failed", self._name(), ctx.task.rn)
                    self.sink.give_up(ctx)
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
        if ctx.stopped:  # prefetched, and cancelled, lost or yielded before its turn
            self._log_stop(ctx, ctx.stop_reason)
            self.sink.hand_over(ctx, None)
            return None
        if self.sink.start_needs_writes(ctx) and not self.sink.write_before_start(ctx):
            self._log_stop(ctx, ctx.stop_reason)
            self.sink.hand_over(ctx, None)
            return None
        if self.isolation is not None:
            self.isolation.ready()  # a child that cannot start is the worker's failure
        with self._running(ctx, self._traceparent(ctx)) as run:
            self._upgrade(ctx)
            run.result = self._call(ctx, run)
        write_held_checkpoint(ctx)
        self._close_handler_connections()
        if self._after_task is not None:
            self._after_task()  # before the outcome's write, which may lease the next task
        if not ctx.end():
            raise _Abandoned
        with self._writes():
            if isinstance(ctx.stop_reason, ChildDied):
                self._lapse(ctx)
            return self.sink.finish_here(
                ctx, self._logged(ctx, run.log, self._kept(ctx, run.outcome))
            )

    def _lapse(self, ctx: TaskContext) -> None:
        """Let the lease of `ctx`, whose child process died running it, lapse now: the monitor
        resets it as the lease of a dead worker (see `isolation.py`). The heartbeat no longer
        extends it (the task is stopped); should this write fail, or a heartbeat sent before
        the stop land after it, the lease lapses at its deadline instead, to the same end."""
        try:
            ctx.task.lapse_lease(ctx.worker)
        except (DatabaseError, ScyllaError) as exc:
            logger.warning(
                "%s: could not end the lease of %s at once: %s", self._name(), ctx.task.rn, exc
            )

    def _call(self, ctx: TaskContext, run: _Run) -> Any:
        """Call the handler, in this thread's child process under isolation, recording what
        it used in `run.usage` (an `async def` handler of a foreground run in an event loop of
        its own)."""
        if self.isolation is not None:
            cpu_limit = self.registry.cpu_limit_of(ctx.task.queue)
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
            if inspect.iscoroutine(result):
                result = asyncio.run(result)
            return result
        finally:
            run.record(meter.usage())

    def _close_handler_connections(self) -> None:
        """Close the connections the handler's own queries opened, as at the end of a request
        (not in the foreground: the caller's connection is the handler's)."""
        if not self.foreground:
            close_handler_connections()

    def _writes(self) -> AbstractContextManager[None]:
        """Where this thread's writes of outcomes and logs go: a connection of its own, or the
        caller's in the foreground."""
        return nullcontext() if self.foreground else self._own.used()

    async def _execute_async(self, ctx: TaskContext) -> None:
        """An `async def` handler, on the event loop thread: up to `concurrency` at once there
        (the prefetched ones wait their turn)."""
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.concurrency)
        async with self._turns:
            if ctx.stopped:  # prefetched, and cancelled, lost or yielded before its turn
                self._log_stop(ctx, ctx.stop_reason)
                self.sink.hand_over(ctx, None)
                return
            if self.sink.start_needs_writes(ctx) and not await asyncio.to_thread(
                self.sink.write_before_start, ctx
            ):
                self._log_stop(ctx, ctx.stop_reason)
                self.sink.hand_over(ctx, None)
                return
            traceparent = None
            if tracing.enabled():
                traceparent = await asyncio.to_thread(self._traceparent_apart, ctx)
            with self._running(ctx, traceparent) as run:
                if self._upgrades(ctx):
                    await asyncio.to_thread(self._upgrade_apart, ctx)
                run.result = await run.handler(ctx)
        if ctx.holds_checkpoint:
            await apart(write_held_checkpoint, ctx)
        if run.log is not None and run.log.size:
            await asyncio.to_thread(self._keep_log_apart, ctx, run.log)
        if self._after_task is not None:
            self._after_task()
        if not ctx.end():
            return  # the watchdog ended it
        try:
            self.sink.hand_over(ctx, self._kept(ctx, run.outcome))
        except Exception:  # a bug of ours: log it, give the task up
            logger.exception("%s: running %s failed", self._name(), ctx.task.rn)
            self.sink.give_up(ctx)

    # -- bundles ----------------------------------------------------------------------------

    def run_bundle(self, contexts: Sequence[TaskContext]) -> list[tuple[TaskContext, Outcome]]:
        """Call the bundle handler of the members' queue once, on this thread, with the members
        still live (docs/howto/bundle-handlers.md); return the outcome of each member that gets
        one, with the log of the call (each member keeps it) and an even share of what the
        call used: what the handler decided for it (`ctx.complete()`, `ctx.abort()`), else,
        when the handler returned, its result (a mapping of rn to result; None for a member it
        does not name), or, when the handler raised, the abort of that exception. A member
        that was stopped (cancelled, lease lost) gets none; one past its run-time limit is
        aborted with `timeout`.
        """
        live = [ctx for ctx in contexts if not ctx.stopped]
        outcomes: list[tuple[TaskContext, Outcome]] = []
        for ctx in [ctx for ctx in live if self._upgrades(ctx)]:
            try:
                self._upgrade(ctx)
            except BaseException as exc:  # the member's outcome, never ours
                live.remove(ctx)
                refused = None if isinstance(exc, STOPS) else self._raised(ctx, exc)
                if refused is not None and ctx.end():
                    outcomes.append((ctx, dataclasses.replace(refused, task=ctx.task)))
        if not live:
            return outcomes
        queue = live[0].task.queue
        handler: Any = self.registry.get(queue)  # takes the list of contexts
        if handler is None:
            raise RuntimeError("leased a bundle of a queue without a handler")
        returned: Any = None
        raised: BaseException | None = None
        meter = ThreadMeter()
        started = time.monotonic()
        for ctx in live:
            ctx.handler_running = True
            ctx.handler_started = started
        self.hooks.note("started", len(live))
        traceparents: list[str | None] = [None] * len(live)
        if tracing.enabled():
            stored = traces.traceparents_of(
                live[0].task._state.db or "default", [ctx.task.rn for ctx in live]
            )
            traceparents = [stored.get(ctx.task.rn) for ctx in live]
        leased = min(ctx.started for ctx in live)
        with (
            tracing.process_span(
                queue, [c.task for c in live], traceparents, self._name(), leased
            ) as span,
            captured() as log,
        ):
            traceparent = tracing.current_traceparent()
            for ctx in live:
                ctx.span, ctx.traceparent = span, traceparent
            try:
                returned = handler(live)
                if inspect.iscoroutine(returned):
                    returned = asyncio.run(returned)
            except BaseException as exc:  # the handler's outcome, never ours
                raised = exc
                if log is not None:
                    log.exception(exc)
                if self._post_mortem is not None and not isinstance(exc, STOPS):
                    self._post_mortem(exc)
                logger.warning("%s: bundle handler of %s raised %r", self._name(), queue, exc)
            finally:
                for ctx in live:
                    ctx.handler_running = False
                    ctx.span = None
            if raised is not None and not isinstance(raised, STOPS):
                tracing.finish(span, "aborted", exception_error(raised))
            else:
                tracing.finish(span, "completed")
        for ctx in live:
            write_held_checkpoint(ctx)
        self._close_handler_connections()
        duration = time.monotonic() - started
        usage = meter.usage()
        share = None if usage.cpu_time is None else usage.cpu_time / len(live)
        for ctx in live:
            decided = _member_outcome(ctx, returned, raised)
            outcome = None
            if decided is not None:
                result, errors = decided
                outcome = Outcome(
                    ctx.task.pk,
                    ctx.task.leases,
                    result,
                    errors=errors,
                    children=tuple(ctx.children) if errors is None else (),
                    duration=duration,
                    cpu_time=share,
                    task=ctx.task,
                )
            outcome = self._logged(ctx, log, outcome)
            if outcome is not None and ctx.end():
                outcomes.append((ctx, outcome))
        return outcomes

    # -- outcomes ---------------------------------------------------------------------------

    @contextmanager
    def _running(self, ctx: TaskContext, traceparent: str | None) -> Iterator[_Run]:
        """Run the handler of `ctx` in the block (`run.result = run.handler(ctx)`, or awaited);
        afterwards `run.outcome` is what it returned or raised, timed. The run is a `process`
        span (`tracing`; `traceparent` is the one stored with the task), ended with its
        outcome.

        Whatever the handler raises is its outcome, never ours: SystemExit, KeyboardInterrupt,
        and asyncio.CancelledError too.
        """
        handler = self.registry.get(ctx.task.queue)
        if handler is None:
            raise RuntimeError("leased a task of a queue without a handler")
        run = _Run(handler)
        outcome: Outcome | None
        ctx.handler_running = True
        started = ctx.handler_started = time.monotonic()
        self.hooks.note("started")
        stop: BaseException | None = None
        task = ctx.task
        with tracing.process_span(
            task.queue, [task], [traceparent], self._name(), ctx.started
        ) as span:
            ctx.span, ctx.traceparent = span, tracing.current_traceparent()
            with captured() as run.log:
                try:
                    yield run
                    outcome = self._returned(ctx, run.result)
                except BaseException as exc:
                    if run.log is not None and not isinstance(exc, Relayed):
                        run.log.exception(exc)  # (a child process's log has its own traceback)
                    if isinstance(exc, STOPS):
                        stop, outcome = exc, None
                    else:
                        if self._post_mortem is not None:
                            self._post_mortem(exc)
                        outcome = self._raised(ctx, exc)
                finally:
                    ctx.handler_running = False
            ctx.span = None
            _trace_finish(span, outcome)
        if stop is not None:
            # Outside the capture: the worker's own line, not the task's log (a run that logged
            # nothing and was stopped keeps no log; see `TaskLog.exception`).
            self._log_stop(ctx, stop)
        run.outcome = _timed(outcome, ctx.task, started, run.usage)

    # -- before the handler: the trace, the spec's version -------------------------------

    def _traceparent(self, ctx: TaskContext) -> str | None:
        """The traceparent stored with `ctx`'s task, read only when spans are recorded."""
        if not tracing.enabled():
            return None
        return traces.traceparent_of(ctx.task._state.db or "default", ctx.task.rn)

    def _upgrades(self, ctx: TaskContext) -> bool:
        """Whether `ctx`'s spec is of another version than its handler reads."""
        task = ctx.task
        return spec_versions.stored_version(task.version) != spec_versions.handler_version(
            task.queue
        )

    def _upgrade(self, ctx: TaskContext) -> None:
        """Before the handler runs: bring a spec stored at an older version up to its
        handler's with the queue's migrations, written fenced on the lease
        (`Task.upgrade_spec`); every runner calls this (a worker's threads, its event loop,
        its bundles, the foreground runs).

        A spec of a newer version than the handler reads (an older worker, beside newer ones
        in a rolling deploy) is given back with a snooze, for a worker that reads it; a
        migration that raises, or that is missing, aborts the task with
        `spec_migration_failed`; a lease lost meanwhile stops it.
        """
        if not self._upgrades(ctx):
            return
        task = ctx.task
        stored = spec_versions.stored_version(task.version)
        reads = spec_versions.handler_version(task.queue)
        if stored > reads:
            logger.warning(
                "%s: %s holds a spec of version %d, its handler here reads %d: given back",
                self._name(),
                task.rn,
                stored,
                reads,
            )
            raise Snooze(spec_versions.NEWER_SPEC_SNOOZE)
        try:
            spec, version = spec_versions.upgrade(task.queue, task.spec, task.version)
        except Exception as exc:
            raise Abort(
                spec_versions.MIGRATION_FAILED,
                f"the spec of version {stored} could not be upgraded to {reads}: {exc!r}",
                args={"from_version": stored, "to_version": reads},
            ) from exc
        try:
            task.upgrade_spec(ctx.worker, spec, version)
        except ValidationError as exc:
            raise Abort(
                spec_versions.MIGRATION_FAILED,
                f"the spec upgraded to version {reads} is not valid: {'; '.join(exc.messages)}",
                args={"from_version": stored, "to_version": reads},
            ) from exc
        except (LeaseLost, TaskCancelled) as exc:
            ctx.stop(exc)
            raise

    def _upgrade_apart(self, ctx: TaskContext) -> None:
        """`_upgrade` off the event loop, on a connection closed after."""
        try:
            self._upgrade(ctx)
        finally:
            connections.close_all()  # this pool thread's own: not kept between tasks

    def _traceparent_apart(self, ctx: TaskContext) -> str | None:
        """`_traceparent` off the event loop, on a connection closed after."""
        try:
            return self._traceparent(ctx)
        finally:
            connections.close_all()

    def _log_stop(self, ctx: TaskContext, stop: BaseException | None) -> None:
        """The worker's line for a task stopped while its handler ran or before it started (a
        shutdown's at DEBUG: the summary counts them)."""
        level = logging.DEBUG if isinstance(stop, WorkerStopping) else logging.INFO
        logger.log(level, "%s stopped %s: %s", self._name(), ctx.task.rn, stop)

    def _logged(
        self, ctx: TaskContext, log: TaskLog | None, outcome: Outcome | None
    ) -> Outcome | None:
        """Store what the handler logged, if anything, before its outcome is written: named on
        the row by the outcome's own write when it completes or aborts the task (no statement
        of its own), else by `Task.keep_log`'s."""
        if not self.keep_logs:
            return outcome
        if log is None or not log.size or outcome is None or outcome.snooze is not None:
            self._keep_log(ctx, log)
            return outcome
        try:
            return dataclasses.replace(outcome, log=logs.save_log(ctx.task.rn, log.text()))
        except Exception:  # the storage's failure costs the log, not the task's outcome
            logger.exception("%s: could not keep the log of %s", self._name(), ctx.task.rn)
            return outcome

    def _keep_log(self, ctx: TaskContext, log: TaskLog | None) -> None:
        """Store what the handler logged, if anything, before its outcome is written."""
        if log is None or not log.size:
            return
        try:
            ctx.task.keep_log(log.text())
        except Exception:  # the storage's failure costs the log, not the task's outcome
            logger.exception("%s: could not keep the log of %s", self._name(), ctx.task.rn)

    def _keep_log_apart(self, ctx: TaskContext, log: TaskLog) -> None:
        """`_keep_log` off the event loop (a storage may be slow), on a connection closed after."""
        try:
            self._keep_log(ctx, log)
        finally:
            connections.close_all()  # this pool thread's own: not kept between tasks

    def _returned(self, ctx: TaskContext, result: Any) -> Outcome:
        task = ctx.task
        try:
            value = validate_json(result, "result", allow_null=True)
            return Outcome(task.pk, task.leases, value, children=tuple(ctx.children))
        except ValidationError as exc:  # a result that is not JSON, or too large
            logger.warning("%s: the result of %s was rejected: %s", self._name(), task.rn, exc)
            return Outcome(task.pk, task.leases, errors=[invalid_result(exc)])

    def _raised(self, ctx: TaskContext, exc: BaseException) -> Outcome | None:
        task = ctx.task
        if isinstance(exc, TaskTimedOut):
            return Outcome(task.pk, task.leases, errors=[exc.as_error()])
        if isinstance(exc, Abort):
            return Outcome(task.pk, task.leases, errors=[exc.as_error()])
        if isinstance(exc, Snooze):
            try:
                delay = self.registry.snooze_delay(task) if exc.delay is None else exc.delay
                return Outcome(task.pk, task.leases, snooze=validate_delay(delay))
            except ValidationError as invalid:
                error = error_record("invalid_delay", "; ".join(invalid.messages))
                return Outcome(task.pk, task.leases, errors=[error])
        logger.warning("%s: handler of %s raised %r", self._name(), task.rn, exc)
        return Outcome(task.pk, task.leases, errors=[exception_error(exc)])

    def _kept(self, ctx: TaskContext, outcome: Outcome | None) -> Outcome | None:
        """The outcome to write: none for a task stopped while its handler ran, the abort
        `timeout` for one that ran past its run-time limit."""
        reason = ctx.stop_reason
        if outcome is not None and isinstance(reason, TaskTimedOut) and not ctx.yielded:
            if outcome.errors != [reason.as_error()]:
                logger.info(
                    "%s: %s timed out; its outcome is the abort timeout", self._name(), ctx.task.rn
                )
            return dataclasses.replace(outcome, result=None, errors=[reason.as_error()])
        if outcome is not None and ctx.stopped and not ctx.yielded:
            logger.info("%s: %s was stopped; its outcome is not written", self._name(), ctx.task.rn)
            return None
        return outcome


def _member_outcome(
    ctx: TaskContext, returned: Any, raised: BaseException | None
) -> tuple[Any, list[dict[str, Any]] | None] | None:
    """What to write for one member of a bundle: (result, None) or (None, errors); None for
    none."""
    reason = ctx.stop_reason
    if isinstance(reason, TaskTimedOut) and not ctx.yielded:
        return None, [reason.as_error()]
    if ctx.stopped and not ctx.yielded:
        return None  # cancelled or lost: its lease is not ours to end
    if ctx.decision is not None:
        result, errors = ctx.decision
    elif raised is not None:
        if isinstance(raised, STOPS) and (ctx.stopped or raised.rn == ctx.task.rn):
            return None  # a stop let through (a shutdown's yield): not the member's failure
        error = raised.as_error() if isinstance(raised, Abort) else exception_error(raised)
        result, errors = None, [error]
    elif returned is None or isinstance(returned, Mapping):
        result, errors = None if returned is None else returned.get(ctx.task.rn), None
    else:
        kind = type(returned).__name__
        detail = f"a bundle handler returns None or a mapping of rn to result, not {kind}"
        return None, [error_record("invalid_result", detail)]
    if errors is None:
        try:
            result = validate_json(result, "result", allow_null=True)
        except ValidationError as exc:
            return None, [invalid_result(exc)]
    return result, errors


def _trace_finish(span: Any, outcome: Outcome | None) -> None:
    """Record how a run ended on its `process` span (`tracing.finish`)."""
    if span is None:
        return
    if outcome is None:
        tracing.finish(span, "stopped")
    elif outcome.snooze is not None:
        tracing.finish(span, "snoozed")
    elif outcome.errors:
        tracing.finish(span, "aborted", outcome.errors[0])
    else:
        tracing.finish(span, "completed")


def start_daemon(target: Callable[[], None], name: str) -> threading.Thread:
    """Start `target` on a daemon thread named `name`."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def _timed(
    outcome: Outcome | None, task: Task, started: float, usage: Usage | None
) -> Outcome | None:
    """`outcome` with the seconds since `started` (the handler's run time), what the run
    used, and its task."""
    if outcome is None:
        return None
    return dataclasses.replace(
        outcome,
        duration=time.monotonic() - started,
        cpu_time=usage.cpu_time if usage is not None else None,
        peak_memory=usage.peak_memory if usage is not None else None,
        task=task,
    )
