"""The watchdog: a thread that watches the clock for the tasks in hand, never the database.

- **Run-time limits** (README, "Run-time limits"): at `timeout` after its lease a task is
  stopped (`ctx.check()` raises TaskTimedOut, and whatever the handler returns, its outcome is
  the abort `timeout`); a handler still running `timeout_grace` later is given up: the abort
  `timeout` is written for it, its slot freed and its thread replaced (the thread itself
  cannot be killed: it runs on, a daemon, and whatever it returns is dropped).
- **Lease keeping**: every heartbeat the database answers tells until when the lease is surely
  held (`ctx.lease_kept_until`, a margin before the lease can expire). When heartbeats fail
  (the database is unreachable, or a heartbeat hangs) and that time comes, the task is given
  up before its lease can expire and be reset: `ctx.check()` raises LeaseLost, nothing is
  written for it, and a handler still running `timeout_grace` later loses its slot and thread
  as above. So a handler that checks never works on past its reset.

The watchdog reads no database, so a heartbeat stuck in a dead connection cannot hold it up.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from ..exceptions import LeaseLost, TaskTimedOut
from ..handlers import TaskContext
from ..models import Outcome
from .execution import Execution
from .options import WorkerOptions

logger = logging.getLogger("scylla_django")

# How often the watchdog looks at the clock (seconds): the precision of a timeout.
TICK = 0.1


@dataclasses.dataclass
class _Watched:
    """What the watchdog knows of one task in hand."""

    ctx: TaskContext
    stopped_at: float | None = None  # when the watchdog stopped it (monotonic)


class Watchdog:
    """Watches the tasks `in_hand()` returns: stops them at their run-time limit or when their
    lease may have lapsed, and gives up their handlers `timeout_grace` later."""

    def __init__(self, options: WorkerOptions, name: Callable[[], str]) -> None:
        self.options = options
        self._name = name
        self._done = threading.Event()
        self._watched: dict[int, _Watched] = {}
        # The heartbeat's interval: the margin kept before a lease can expire.
        self.margin = options.heartbeat_seconds / 2

    def track(self, ctx: TaskContext) -> None:
        """Set the limits of a task just leased (called as it is put in hand)."""
        ctx.timeout = self.options.registry.timeout_of(ctx.task)
        length = self.options.lease_length.total_seconds()
        ctx.lease_kept_until = ctx.started + length - self.margin

    def kept(self, ctx: TaskContext, sent: float) -> None:
        """A heartbeat sent at `sent` (monotonic) extended `ctx`'s lease."""
        length = self.options.lease_length.total_seconds()
        ctx.lease_kept_until = sent + length - self.margin

    def lease_limit(self, ctx: TaskContext) -> datetime | None:
        """The database time past which `ctx`'s lease is never extended: its lease's start
        plus its timeout and the grace period (None: no limit)."""
        if ctx.timeout is None:
            return None
        started: datetime = ctx.task.updated  # the lease's own time, on the database clock
        return started + ctx.timeout + self.options.timeout_grace

    def close(self) -> None:
        self._done.set()

    def run(self, in_hand: Callable[[], list[TaskContext]], execution: Execution) -> None:
        """The watchdog thread, until `close()`."""
        while not self._done.wait(TICK):
            try:
                self._pass(in_hand(), execution)
            except Exception:  # a bug of ours: never let this thread die
                logger.exception("%s: the watchdog failed", self._name())

    def _pass(self, contexts: list[TaskContext], execution: Execution) -> None:
        now = time.monotonic()
        grace = self.options.timeout_grace.total_seconds()
        current = {ctx.task.pk for ctx in contexts}
        for pk in [pk for pk in self._watched if pk not in current]:
            del self._watched[pk]
        for ctx in contexts:
            watched = self._watched.setdefault(ctx.task.pk, _Watched(ctx))
            if watched.ctx is not ctx:  # the same task leased again
                watched = self._watched[ctx.task.pk] = _Watched(ctx)
            if watched.stopped_at is None:
                self._stop_when_due(watched, now)
            elif now >= watched.stopped_at + grace and ctx.handler_running:
                self._give_up(ctx, execution, grace)

    def _stop_when_due(self, watched: _Watched, now: float) -> None:
        ctx = watched.ctx
        task = ctx.task
        if ctx.yielded:
            return
        if ctx.timeout is not None and now >= ctx.started + ctx.timeout.total_seconds():
            seconds = ctx.timeout.total_seconds()
            ctx.stop(
                TaskTimedOut(f"ran past its {seconds:g}s timeout", rn=task.rn, timeout=seconds)
            )
            watched.stopped_at = now
            logger.warning(
                "%s: %s (queue %s) ran past its %gs timeout: stopping it",
                self._name(),
                task.rn,
                task.queue,
                seconds,
            )
            return
        kept = ctx.lease_kept_until
        if kept is not None and now >= kept and ctx.handler_running:
            ctx.stop(
                LeaseLost(
                    "heartbeats failed and the lease may expire: giving the task up",
                    rn=task.rn,
                )
            )
            watched.stopped_at = now
            logger.warning(
                "%s: no heartbeat of %s (queue %s) was answered in time, its lease may expire: "
                "giving it up (nothing is written for it)",
                self._name(),
                task.rn,
                task.queue,
            )

    def _give_up(self, ctx: TaskContext, execution: Execution, grace: float) -> None:
        """Take `ctx` from a handler that still runs `grace` seconds after it was stopped."""
        if not ctx.end():
            return  # it returned meanwhile: its own outcome goes
        reason = ctx.stop_reason
        task = ctx.task
        execution.abandon(ctx)
        if isinstance(reason, TaskTimedOut):
            logger.error(
                "%s: the handler of %s still runs %gs after its timeout: aborting the task "
                "(timeout); its thread runs on, and what it returns is dropped",
                self._name(),
                task.rn,
                grace,
            )
            errors = [reason.as_error()]
            duration = time.monotonic() - ctx.started
            outcome = Outcome(task.pk, task.leases, errors=errors, duration=duration, task=task)
            execution.sink.hand_over(ctx, outcome)
        else:
            logger.error(
                "%s: the handler of %s still runs %gs after it was given up: its slot is "
                "freed; its thread runs on, and what it returns is dropped",
                self._name(),
                task.rn,
                grace,
            )
            execution.sink.give_up(ctx)
