"""What a handler's run becomes, the room every runner shares: a return or a raise made an
`Outcome` (none for a task that was stopped: a snooze, the children of `ctx.spawn()` and
`ctx.batch()`, the abort `timeout` past the run-time limit), timed, with the run's `process`
span, its log and what it used, handed to an `OutcomeSink` (the worker's outcome writer, a
foreground run's writer).

The runners call it the same way, each on its own thread or loop: a worker's handler threads
(`handler_threads.py`), its event loop (`handler_loop.py`), the bundle call
(`bundle_call.py`) and the foreground call (`foreground_call.py`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from django.core.exceptions import ValidationError
from django.db import connections

from .. import tracing
from ..capture import TaskLog, captured
from ..exceptions import (
    Abort,
    LeaseLost,
    Parked,
    Snooze,
    TaskCancelled,
    TaskTimedOut,
    WorkerStopping,
    error_record,
    exception_error,
)
from ..handlers import HandlerRegistry, TaskContext
from ..models import Outcome, Task, traces
from ..resources import Usage
from ..validation import invalid_result, validate_delay, validate_json
from . import spec_upgrade
from .hooks import WorkerHooks
from .isolation import Relayed
from .run_logs import RunLogs

logger = logging.getLogger("scylla_django")


STOPS = (TaskCancelled, LeaseLost, WorkerStopping, Parked)
"""What a handler raises when it was told to stop (or parked its task itself, which ended the
lease): no outcome is written for its run."""

Outcomes = list[tuple[TaskContext, Outcome]]
"""Outcomes to write, each with the context of its task."""


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
class HandlerRun:
    """A handler's run in `RunOutcomes.running()`."""

    handler: Callable[[TaskContext], Any]
    result: Any = None
    outcome: Outcome | None = None
    usage: Usage | None = None

    def record(self, usage: Usage) -> None:
        self.usage = usage

    log: TaskLog | None = None


class RunOutcomes:
    """Makes the outcomes of the handlers of `registry`, run by the worker called `name()`,
    and hands them to the sink given to `send_to()`.

    `post_mortem(exc)` is called with what a handler raised (not a stop) before its outcome is
    made (a debugger's post-mortem). Without `keep_logs` the tasks' logs are captured but not
    stored (`RunLogs`).
    """

    def __init__(
        self,
        registry: HandlerRegistry,
        name: Callable[[], str],
        *,
        hooks: WorkerHooks | None = None,
        post_mortem: Callable[[BaseException], None] | None = None,
        keep_logs: bool = True,
    ) -> None:
        self.registry = registry
        self.name = name
        self.hooks = hooks if hooks is not None else WorkerHooks()
        self.post_mortem = post_mortem
        self.logs = RunLogs(name, keep_logs=keep_logs)
        self._sink: OutcomeSink | None = None

    def send_to(self, sink: OutcomeSink) -> None:
        """Hand the outcomes made from now on to `sink`."""
        self._sink = sink

    @property
    def sink(self) -> OutcomeSink:
        if self._sink is None:
            raise RuntimeError("the handlers are not started yet")
        return self._sink

    # -- the run ----------------------------------------------------------------------------

    @contextmanager
    def running(self, ctx: TaskContext, traceparent: str | None) -> Iterator[HandlerRun]:
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
        run = HandlerRun(handler)
        outcome: Outcome | None
        ctx.in_hand.handler_running = True
        started = ctx.in_hand.handler_started = time.monotonic()
        self.hooks.note("started")
        stop: BaseException | None = None
        task = ctx.task
        with tracing.process_span(
            task.queue, [task], [traceparent], self.name(), ctx.in_hand.started
        ) as span:
            ctx.span, ctx.traceparent = span, tracing.current_traceparent()
            with captured() as run.log:
                try:
                    yield run
                    outcome = self.returned(ctx, run.result)
                except BaseException as exc:
                    if run.log is not None and not isinstance(exc, Relayed):
                        run.log.exception(exc)  # (a child process's log has its own traceback)
                    if isinstance(exc, STOPS):
                        stop, outcome = exc, None
                    else:
                        if self.post_mortem is not None:
                            self.post_mortem(exc)
                        outcome = self.raised(ctx, exc)
                finally:
                    ctx.in_hand.handler_running = False
            ctx.span = None
            trace_finish(span, outcome)
        if stop is not None:
            # Outside the capture: the worker's own line, not the task's log (a run that logged
            # nothing and was stopped keeps no log; see `TaskLog.exception`).
            self.log_stop(ctx, stop)
        run.outcome = timed(outcome, ctx.task, started, run.usage)

    # -- before the handler: the trace, the spec's version -------------------------------

    def traceparent(self, ctx: TaskContext) -> str | None:
        """The traceparent stored with `ctx`'s task, read only when spans are recorded."""
        if not tracing.enabled():
            return None
        return traces.traceparent_of(ctx.task._state.db or "default", ctx.task.rn)

    def traceparent_apart(self, ctx: TaskContext) -> str | None:
        """`traceparent` off the event loop, on a connection closed after."""
        try:
            return self.traceparent(ctx)
        finally:
            connections.close_all()

    def upgrade(self, ctx: TaskContext) -> None:
        """Bring `ctx`'s spec up to its handler's version (`spec_upgrade.upgrade`)."""
        spec_upgrade.upgrade(ctx, self.name())

    def log_stop(self, ctx: TaskContext, stop: BaseException | None) -> None:
        """The worker's line for a task stopped while its handler ran or before it started (a
        shutdown's at DEBUG: the summary counts them)."""
        level = logging.DEBUG if isinstance(stop, WorkerStopping) else logging.INFO
        logger.log(level, "%s stopped %s: %s", self.name(), ctx.task.rn, stop)

    # -- the outcome ------------------------------------------------------------------------

    def returned(self, ctx: TaskContext, result: Any) -> Outcome:
        task = ctx.task
        try:
            value = validate_json(result, "result", allow_null=True)
            return Outcome(task.pk, task.leases, value, children=tuple(ctx.children))
        except ValidationError as exc:  # a result that is not JSON, or too large
            logger.warning("%s: the result of %s was rejected: %s", self.name(), task.rn, exc)
            return Outcome(task.pk, task.leases, errors=[invalid_result(exc)])

    def raised(self, ctx: TaskContext, exc: BaseException) -> Outcome | None:
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
        logger.warning("%s: handler of %s raised %r", self.name(), task.rn, exc)
        return Outcome(task.pk, task.leases, errors=[exception_error(exc)])

    def kept(self, ctx: TaskContext, outcome: Outcome | None) -> Outcome | None:
        """The outcome to write: none for a task stopped while its handler ran, the abort
        `timeout` for one that ran past its run-time limit."""
        reason = ctx.stop_reason
        if outcome is not None and isinstance(reason, TaskTimedOut) and not ctx.in_hand.yielded:
            if outcome.errors != [reason.as_error()]:
                logger.info(
                    "%s: %s timed out; its outcome is the abort timeout", self.name(), ctx.task.rn
                )
            return dataclasses.replace(outcome, result=None, errors=[reason.as_error()])
        if outcome is not None and ctx.stopped and not ctx.in_hand.yielded:
            logger.info("%s: %s was stopped; its outcome is not written", self.name(), ctx.task.rn)
            return None
        return outcome

    def written(self, ctx: TaskContext, run: HandlerRun) -> Outcome | None:
        """What to write of `run` once its handler returned: the outcome kept (`kept()`), with
        its log (`RunLogs.logged`)."""
        return self.logs.logged(ctx, run.log, self.kept(ctx, run.outcome))


def member_outcome(
    ctx: TaskContext, returned: Any, raised: BaseException | None
) -> tuple[Any, list[dict[str, Any]] | None] | None:
    """What to write for one member of a bundle: (result, None) or (None, errors); None for
    none."""
    reason = ctx.stop_reason
    if isinstance(reason, TaskTimedOut) and not ctx.in_hand.yielded:
        return None, [reason.as_error()]
    if ctx.stopped and not ctx.in_hand.yielded:
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


def trace_finish(span: Any, outcome: Outcome | None) -> None:
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


def timed(
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
