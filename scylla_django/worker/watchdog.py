"""The watchdog: a thread that watches the clock for the tasks in hand, never the database.

- **Run-time limits** (docs/howto/timeouts.md): at `timeout` after its lease a task is
  stopped (`ctx.check()` raises TaskTimedOut, and whatever the handler returns, its outcome is
  the abort `timeout`); a handler still running `timeout_grace` later is given up: the abort
  `timeout` is written for it, its slot freed and its thread replaced (the thread itself
  cannot be killed: it runs on, a daemon, and whatever it returns is dropped). A foreground
  run's handler runs on its caller's thread, which nothing can replace: it is waited for, and
  its task is aborted with `timeout` once it returns.
- **Lease keeping**: every heartbeat the database answers tells until when the lease is surely
  held (`ctx.in_hand.lease_kept_until`, a margin before the lease can expire). When heartbeats fail
  (the database is unreachable, or a heartbeat hangs) and that time comes, the task is given
  up before its lease can expire and be reset: `ctx.check()` raises LeaseLost, nothing is
  written for it, and a handler still running `timeout_grace` later loses its slot and thread
  as above. So a handler that checks never works on past its reset.

The watchdog reads no database, so a heartbeat stuck in a dead connection cannot hold it up.
Nor does it look at every task on every tick: each task waits in a heap ordered by the next
time the watchdog has to look at it (its timeout, the end of its kept lease, the end of its
grace), so a tick costs nothing for the tasks not due, whether a worker holds ten or tens of
thousands of them.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from ..exceptions import LeaseLost, TaskTimedOut
from ..handlers import TaskContext
from ..models import Outcome
from .hooks import WorkerHooks
from .options import WorkerOptions
from .outcomes import OutcomeSink

logger = logging.getLogger("scylla_django")

# How often the watchdog looks at the clock (seconds): the precision of a timeout.
TICK = 0.1


class Runner(Protocol):
    """What runs the handlers the watchdog watches: the worker's `Execution`, or a foreground
    run's `ForegroundCall`."""

    @property
    def foreground(self) -> bool:
        """Whether a handler that runs on past its stop is waited for (it runs on the
        caller's thread), rather than given up."""

    @property
    def sink(self) -> OutcomeSink:
        """Where the outcome of a task given up goes."""

    def abandon(self, ctx: TaskContext) -> None:
        """Leave `ctx`'s handler to itself (its task was given up)."""


class Watchdog:
    """Watches the tasks put in hand (`track()`): stops them at their run-time limit or when
    their lease may have lapsed, and gives up their handlers `timeout_grace` later."""

    def __init__(
        self, options: WorkerOptions, name: Callable[[], str], hooks: WorkerHooks | None = None
    ) -> None:
        self.options = options
        self._name = name
        self.hooks = hooks if hooks is not None else WorkerHooks()
        self._done = threading.Event()
        self._lock = threading.Lock()
        # (when to look, order of arrival, task, when it was stopped or None): a task is
        # looked at when its time comes, and pushed again for its next one, if any.
        self._due: list[tuple[float, int, TaskContext, float | None]] = []
        self._order = itertools.count()
        # The heartbeat's interval: the margin kept before a lease can expire.
        self.margin = options.heartbeat_seconds / 2

    def track(self, ctx: TaskContext, *, limit: bool = True, lease: bool = True) -> None:
        """Set the limits of a task just leased (called as it is put in hand), and watch it:
        its run-time limit (not with `limit` False: a debugger's run) and the keeping of its
        lease (not with `lease` False: a lease no heartbeat extends)."""
        ctx.in_hand.timeout = self.options.registry.timeout_of(ctx.task) if limit else None
        length = self._length(ctx)
        ctx.in_hand.lease_kept_until = ctx.in_hand.started + length - self.margin if lease else None
        self._push(self._next_look(ctx), ctx, None)

    def kept(self, ctx: TaskContext, sent: float) -> None:
        """A heartbeat sent at `sent` (monotonic) extended `ctx`'s lease."""
        ctx.in_hand.lease_kept_until = sent + self._length(ctx) - self.margin

    def _length(self, ctx: TaskContext) -> float:
        """How long `ctx`'s lease lasts from its last extension: a full lease once the
        database knows its handler has started, a reservation before."""
        options = self.options
        return (
            options.lease_length if ctx.in_hand.start_recorded else options.reservation
        ).total_seconds()

    def watched(self) -> int:
        """How many tasks the watchdog is waiting to look at (the tasks given back to the
        heap after their outcome leave it when their time comes)."""
        with self._lock:
            return len(self._due)

    def close(self) -> None:
        self._done.set()

    def run(
        self,
        holds: Callable[[TaskContext], bool],
        held: Callable[[], int],
        execution: Runner,
    ) -> None:
        """The watchdog thread, until `close()`. `holds(ctx)` tells whether `ctx` is still in
        hand (a task whose outcome was written, or that was given up, is forgotten), `held()`
        how many tasks are."""
        while not self._done.wait(TICK):
            try:
                self._pass(holds, execution)
                self._forget(holds, held())
            except Exception:  # a bug of ours: never let this thread die
                logger.exception("%s: the watchdog failed", self._name())

    def _forget(self, holds: Callable[[TaskContext], bool], held: int) -> None:
        """Drop the tasks no longer in hand once they are most of the heap: a worker that
        finishes thousands of short tasks a second keeps no more than twice what it holds."""
        with self._lock:
            if len(self._due) <= 2 * held + 256:
                return
            self._due = [entry for entry in self._due if holds(entry[2])]
            heapq.heapify(self._due)

    def _next_look(self, ctx: TaskContext) -> float:
        """When a running task's timeout or the end of its kept lease comes, whichever first."""
        when = (
            ctx.in_hand.lease_kept_until
            if ctx.in_hand.lease_kept_until is not None
            else float("inf")
        )
        if ctx.in_hand.timeout is not None:
            when = min(when, ctx.in_hand.started + ctx.in_hand.timeout.total_seconds())
        return when

    def _push(self, when: float, ctx: TaskContext, stopped_at: float | None) -> None:
        if when == float("inf"):
            return
        with self._lock:
            heapq.heappush(self._due, (when, next(self._order), ctx, stopped_at))

    def _pass(self, holds: Callable[[TaskContext], bool], execution: Runner) -> None:
        now = time.monotonic()
        grace = self.options.timeout_grace.total_seconds()
        while True:
            with self._lock:
                if not self._due or self._due[0][0] > now:
                    return
                _, _, ctx, stopped_at = heapq.heappop(self._due)
            if not holds(ctx) or ctx.in_hand.yielded:
                continue
            if stopped_at is None:
                stopped_at = self._stop_when_due(ctx, now)
                if stopped_at is None:  # not due yet (a heartbeat kept its lease), or waits
                    self._push(max(self._next_look(ctx), now + TICK), ctx, None)
                else:
                    self._push(stopped_at + grace, ctx, stopped_at)
            elif ctx.in_hand.handler_running:
                self._give_up(ctx, execution, grace)

    def _stop_when_due(self, ctx: TaskContext, now: float) -> float | None:
        """Stop `ctx` if its timeout came, or its lease may lapse while its handler runs;
        return when it was stopped (None: not stopped)."""
        task = ctx.task
        if (
            ctx.in_hand.timeout is not None
            and now >= ctx.in_hand.started + ctx.in_hand.timeout.total_seconds()
        ):
            seconds = ctx.in_hand.timeout.total_seconds()
            ctx.stop(
                TaskTimedOut(f"ran past its {seconds:g}s timeout", rn=task.rn, timeout=seconds)
            )
            logger.warning(
                "%s: %s (queue %s) ran past its %gs timeout: stopping it",
                self._name(),
                task.rn,
                task.queue,
                seconds,
            )
            return now
        kept = ctx.in_hand.lease_kept_until
        if kept is not None and now >= kept and ctx.in_hand.handler_running:
            ctx.stop(
                LeaseLost(
                    "heartbeats failed and the lease may expire: giving the task up",
                    rn=task.rn,
                )
            )
            logger.warning(
                "%s: no heartbeat of %s (queue %s) was answered in time, its lease may expire: "
                "giving it up (nothing is written for it)",
                self._name(),
                task.rn,
                task.queue,
            )
            return now
        return None

    def _give_up(self, ctx: TaskContext, execution: Runner, grace: float) -> None:
        """Take `ctx` from a handler that still runs `grace` seconds after it was stopped."""
        if execution.foreground:
            logger.error(
                "%s: the handler of %s still runs %gs after it was stopped (%s); it runs on the "
                "caller's thread, which waits for it",
                self._name(),
                ctx.task.rn,
                grace,
                ctx.stop_reason,
            )
            return
        if not ctx.end():
            return  # it returned meanwhile: its own outcome goes
        reason = ctx.stop_reason
        task = ctx.task
        execution.abandon(ctx)
        self.hooks.note("given_up")
        if isinstance(reason, TaskTimedOut):
            logger.error(
                "%s: the handler of %s still runs %gs after its timeout: aborting the task "
                "(timeout); its thread runs on, and what it returns is dropped",
                self._name(),
                task.rn,
                grace,
            )
            errors = [reason.as_error()]
            duration = time.monotonic() - ctx.in_hand.started
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
