"""The foreground call: a plain or `async def` handler run on the caller's thread, for a task
run in the foreground (`foreground.py`: `scylla_run`, the testing helpers, the eager mode).

The handler runs on the caller's connection, left open (a dry run's transaction, a test's), an
`async def` one in an event loop of its own; its outcome is made as a worker's handler threads
make theirs (`outcomes.py`). Its handler cannot be left to itself, since nothing can take the
caller's thread's place: the watchdog waits for a handler that runs on past its stop.
"""

from __future__ import annotations

import asyncio
import inspect

from ..handlers import TaskContext
from ..resources import ThreadMeter
from .outcomes import OutcomeSink, RunOutcomes


class ForegroundCall:
    """Runs handlers on the calling thread, making their outcomes with `outcomes`."""

    foreground = True
    """The watchdog waits for a handler run here rather than give it up (see `abandon`)."""

    def __init__(self, outcomes: RunOutcomes) -> None:
        self.outcomes = outcomes

    @property
    def sink(self) -> OutcomeSink:
        return self.outcomes.sink

    def abandon(self, ctx: TaskContext) -> None:
        """Never called: the caller's thread waits for its handler."""
        raise RuntimeError("a handler run in the foreground is waited for, never abandoned")

    def run(self, ctx: TaskContext) -> None:
        """Run `ctx`'s handler on this thread and hand its outcome to the sink."""
        outcomes = self.outcomes
        sink = outcomes.sink
        if ctx.stopped:  # cancelled or lost before its handler started
            outcomes.log_stop(ctx, ctx.stop_reason)
            sink.hand_over(ctx, None)
            return
        if sink.start_needs_writes(ctx) and not sink.write_before_start(ctx):
            outcomes.log_stop(ctx, ctx.stop_reason)
            sink.hand_over(ctx, None)
            return
        with outcomes.running(ctx, outcomes.traceparent(ctx)) as run:
            outcomes.upgrade(ctx)
            meter = ThreadMeter()
            try:
                result = run.handler(ctx)
                if inspect.iscoroutine(result):
                    result = asyncio.run(result)
                run.result = result
            finally:
                run.record(meter.usage())
        if not ctx.end():
            return  # ended elsewhere: no outcome of this run is handed over
        sink.finish_here(ctx, outcomes.written(ctx, run))
