"""The bundle call: a bundle handler (`@handler(bundle_size=…)`) called once with the contexts
of its bundle's members, on the calling thread (a bundler's, or the caller's in the
foreground), and the outcome each member gets from it (docs/howto/bundle-handlers.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Sequence
from typing import Any

from .. import tracing
from ..capture import captured
from ..durable import write_held_checkpoint
from ..exceptions import exception_error
from ..handlers import TaskContext
from ..models import Outcome, traces
from ..resources import ThreadMeter
from . import spec_upgrade
from .database import close_handler_connections
from .outcomes import STOPS, RunOutcomes, member_outcome

logger = logging.getLogger("scylla_django")


class BundleCall:
    """Calls bundle handlers, making their members' outcomes with `outcomes`. A `foreground`
    call runs on the caller's connection, left open (a dry run's transaction, a test's)."""

    def __init__(self, outcomes: RunOutcomes, *, foreground: bool = False) -> None:
        self.outcomes = outcomes
        self.foreground = foreground

    def run(self, contexts: Sequence[TaskContext]) -> list[tuple[TaskContext, Outcome]]:
        """Call the bundle handler of the members' queue once, on this thread, with the members
        still live (docs/howto/bundle-handlers.md); return the outcome of each member that gets
        one, with the log of the call (each member keeps it) and an even share of what the
        call used: what the handler decided for it (`ctx.complete()`, `ctx.abort()`), else,
        when the handler returned, its result (a mapping of rn to result; None for a member it
        does not name), or, when the handler raised, the abort of that exception. A member
        that was stopped (cancelled, lease lost) gets none; one past its run-time limit is
        aborted with `timeout`.
        """
        outcomes = self.outcomes
        name = outcomes.name
        live = [ctx for ctx in contexts if not ctx.stopped]
        made: list[tuple[TaskContext, Outcome]] = []
        for ctx in [ctx for ctx in live if spec_upgrade.upgrades(ctx)]:
            try:
                outcomes.upgrade(ctx)
            except BaseException as exc:  # the member's outcome, never ours
                live.remove(ctx)
                refused = None if isinstance(exc, STOPS) else outcomes.raised(ctx, exc)
                if refused is not None and ctx.end():
                    made.append((ctx, dataclasses.replace(refused, task=ctx.task)))
        if not live:
            return made
        queue = live[0].task.queue
        handler: Any = outcomes.registry.get(queue)  # takes the list of contexts
        if handler is None:
            raise RuntimeError("leased a bundle of a queue without a handler")
        returned: Any = None
        raised: BaseException | None = None
        meter = ThreadMeter()
        started = time.monotonic()
        for ctx in live:
            ctx.in_hand.handler_running = True
            ctx.in_hand.handler_started = started
        outcomes.hooks.note("started", len(live))
        traceparents: list[str | None] = [None] * len(live)
        if tracing.enabled():
            stored = traces.traceparents_of(
                live[0].task._state.db or "default", [ctx.task.rn for ctx in live]
            )
            traceparents = [stored.get(ctx.task.rn) for ctx in live]
        leased = min(ctx.in_hand.started for ctx in live)
        with (
            tracing.process_span(
                queue, [c.task for c in live], traceparents, name(), leased
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
                if outcomes.post_mortem is not None and not isinstance(exc, STOPS):
                    outcomes.post_mortem(exc)
                logger.warning("%s: bundle handler of %s raised %r", name(), queue, exc)
            finally:
                for ctx in live:
                    ctx.in_hand.handler_running = False
                    ctx.span = None
            if raised is not None and not isinstance(raised, STOPS):
                tracing.finish(span, "aborted", exception_error(raised))
            else:
                tracing.finish(span, "completed")
        for ctx in live:
            write_held_checkpoint(ctx)
        if not self.foreground:  # the caller's connection is the handler's in the foreground
            close_handler_connections()
        duration = time.monotonic() - started
        usage = meter.usage()
        share = None if usage.cpu_time is None else usage.cpu_time / len(live)
        for ctx in live:
            decided = member_outcome(ctx, returned, raised)
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
            outcome = outcomes.logs.logged(ctx, log, outcome)
            if outcome is not None and ctx.end():
                made.append((ctx, outcome))
        return made
