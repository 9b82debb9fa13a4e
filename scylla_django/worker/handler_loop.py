"""A worker's event loop: the slots of `async def` handlers.

An `async def` handler's slot is a coroutine on one event loop thread (an asyncio task), up to
`concurrency` at once, without a thread each: a worker whose handlers are all `async def` holds
any number of slots with its few threads of its own (the lease loop, the writer, the heartbeat,
the watchdog, the listener, the event loop). What blocks (the spec's upgrade, the trace's
lookup, the log's storage, the writes before a start) runs off the loop, on a pool thread.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from .. import tracing
from ..durable import write_held_checkpoint
from ..handlers import TaskContext, apart
from . import spec_upgrade
from .daemons import start_daemon
from .outcomes import RunOutcomes

logger = logging.getLogger("scylla_django")


class HandlerLoop:
    """Runs the `async def` handlers of the tasks handed to `dispatch()` on an event loop
    thread (started only when a queue of `queues` has an `async def` handler), up to
    `concurrency` at once, making their outcomes with `outcomes`. `after_task` is called once
    each handler has run, before its outcome is handed over."""

    def __init__(
        self,
        outcomes: RunOutcomes,
        queues: Sequence[str],
        concurrency: int,
        *,
        after_task: Callable[[], None] | None = None,
    ) -> None:
        self.outcomes = outcomes
        self.queues = list(queues)
        self.concurrency = concurrency
        self._after_task = after_task
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turns: asyncio.Semaphore | None = None  # made on the event loop
        self._futures: dict[int, Future[None]] = {}  # the handlers running, by task pk

    def start(self) -> None:
        """Start the event loop, if any handler of the queues is `async def`."""
        registry = self.outcomes.registry
        if any(inspect.iscoroutinefunction(registry.get(q)) for q in self.queues):
            self._loop = asyncio.new_event_loop()
            start_daemon(self._loop.run_forever, "scylla-async")

    def stop(self) -> None:
        """Stop the event loop, if there is one."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def runs(self, ctx: TaskContext) -> bool:
        """Whether `ctx`'s handler is an `async def` run on the event loop."""
        return self._loop is not None and inspect.iscoroutinefunction(
            self.outcomes.registry.get(ctx.task.queue)
        )

    def dispatch(self, ctx: TaskContext) -> None:
        """Run `ctx`'s handler on the event loop (`runs(ctx)`)."""
        if self._loop is None:
            raise RuntimeError("no event loop runs the async def handlers")
        future = asyncio.run_coroutine_threadsafe(self._execute(ctx), self._loop)
        self._futures[ctx.task.pk] = future
        future.add_done_callback(lambda _: self._futures.pop(ctx.task.pk, None))

    def cancel(self, ctx: TaskContext) -> bool:
        """Cancel `ctx`'s handler (the watchdog ended its task); whether it ran on the loop."""
        future = self._futures.get(ctx.task.pk)
        if future is None:
            return False
        future.cancel()
        return True

    async def _execute(self, ctx: TaskContext) -> None:
        """An `async def` handler, on the event loop thread: up to `concurrency` at once there
        (the prefetched ones wait their turn)."""
        outcomes = self.outcomes
        sink = outcomes.sink
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.concurrency)
        async with self._turns:
            if ctx.stopped:  # prefetched, and cancelled, lost or yielded before its turn
                outcomes.log_stop(ctx, ctx.stop_reason)
                sink.hand_over(ctx, None)
                return
            if sink.start_needs_writes(ctx) and not await asyncio.to_thread(
                sink.write_before_start, ctx
            ):
                outcomes.log_stop(ctx, ctx.stop_reason)
                sink.hand_over(ctx, None)
                return
            traceparent = None
            if tracing.enabled():
                traceparent = await asyncio.to_thread(outcomes.traceparent_apart, ctx)
            with outcomes.running(ctx, traceparent) as run:
                if spec_upgrade.upgrades(ctx):
                    await asyncio.to_thread(spec_upgrade.upgrade_apart, ctx, outcomes.name())
                run.result = await run.handler(ctx)
        if ctx.pending_checkpoint.waiting:
            await apart(write_held_checkpoint, ctx)
        if run.log is not None and run.log.size:
            await asyncio.to_thread(outcomes.logs.keep_apart, ctx, run.log)
        if self._after_task is not None:
            self._after_task()
        if not ctx.end():
            return  # the watchdog ended it
        try:
            sink.hand_over(ctx, outcomes.kept(ctx, run.outcome))
        except Exception:  # a bug of ours: log it, give the task up
            logger.exception("%s: running %s failed", outcomes.name(), ctx.task.rn)
            sink.give_up(ctx)
