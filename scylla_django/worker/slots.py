"""What a worker has in hand: the tasks it leased and has not finished, and the free slots a
lease in progress has claimed. `Slots` owns its lock; the other parts ask it, never look."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence

from ..handlers import TaskContext
from ..models import Task, Worker
from .hooks import WorkerHooks

logger = logging.getLogger("scylla_django")

CLAIM_LIMIT = 1000
"""Slots one lease statement fills at most: a worker with more free slots fills them with one
statement after another (each short, so that its heartbeat and writes, which share its
connection, never wait long)."""

QUICK = 0.05
"""Seconds under which a handler's run is quick: the worker prefetches while its handlers are
(a task prefetched behind quick ones waits little for its turn)."""

PACE_WEIGHT = 0.2
"""How much each quick run moves the pace the prefetch is sized by (a moving average)."""

MIN_PACE = 1e-4
"""The shortest run the prefetch is sized by, in seconds."""

GIVE_BACK = 1.0
"""Seconds of a handler's run after which, when every handler is that busy, the tasks waiting
for one are given back (`Slots.stuck`; yielded, the monitor's next pass makes them ready for
any worker)."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """Free slots taken for one lease in progress (`size`), and the tasks in `done` whose
    outcomes are written with that lease (their slots are among the `size`)."""

    size: int
    done: tuple[TaskContext, ...] = ()


class Slots:
    """At most `concurrency + prefetch` tasks in hand, `max_tasks` leased in all (None: no
    limit).

    A slot is taken from the moment a lease is claimed (`claim()`) until the task's outcome
    is written or the task is given up (`release()`): a lease and a handler thread leasing at
    the same time never hold more than `concurrency + prefetch` tasks (the handlers run
    `concurrency` of them at a time; the others wait for a handler, their leases heartbeated
    as the running ones'). The prefetch is taken only while the handlers are quick: once the
    last `concurrency` runs each took under `QUICK` seconds (none at first; a slow run stops
    it until that holds again), and only as much of it as the handlers get through in about
    `QUICK` seconds (`capacity()`): no-op tasks fill it, 10 ms tasks take five per handler.
    `on_free` is called whenever a slot is freed (the lease loop may fill it), `on_take(ctx)`
    for each task put in hand.
    """

    def __init__(
        self,
        concurrency: int,
        max_tasks: int | None,
        on_free: Callable[[], None],
        on_take: Callable[[TaskContext], None] | None = None,
        prefetch: int = 0,
        hooks: WorkerHooks | None = None,
    ) -> None:
        self.concurrency = concurrency
        self.hooks = hooks if hooks is not None else WorkerHooks()
        self.prefetch = prefetch
        self.max_tasks = max_tasks
        self._on_free = on_free
        self._on_take = on_take
        self._changed = threading.Condition(threading.Lock())
        self._hand: dict[int, TaskContext] = {}  # leased, outcome not written yet
        self._claimed = 0  # slots a lease in progress will fill
        self._leased = 0
        self._retired = False  # leases no more: past a limit of the worker's
        self._quick_runs = 0  # handler runs under QUICK seconds in a row
        self._pace = QUICK  # their average length, in seconds (moving)

    # -- leasing ----------------------------------------------------------------------------

    def _free(self) -> int:
        """Slots neither in hand nor claimed, within `max_tasks` (the caller holds the lock)."""
        if self._retired:
            return 0
        free = self.capacity() - len(self._hand) - self._claimed
        if self.max_tasks is not None:
            free = min(free, self.max_tasks - self._leased - self._claimed)
        return max(0, free)

    def capacity(self) -> int:
        """The tasks a worker may hold now: `concurrency` running, and, while the handlers
        are quick, as many waiting as make about `QUICK` seconds of work per handler at the
        recent runs' pace, `prefetch` at most."""
        if self._quick_runs < self.concurrency:
            return self.concurrency
        work = self.concurrency * QUICK / max(self._pace, MIN_PACE)
        return self.concurrency + min(self.prefetch, max(1, int(work)))

    def ran(self, seconds: float | None) -> None:
        """Count a handler's run of `seconds`: quick ones turn the prefetch on (and set its
        size by their pace), a slow one off."""
        with self._changed:
            if seconds is None or seconds >= QUICK:
                self._quick_runs = 0
                return
            first = self._quick_runs == 0
            self._quick_runs += 1
            self._pace = seconds if first else self._pace + PACE_WEIGHT * (seconds - self._pace)

    def stuck(self, now: float) -> list[TaskContext]:
        """The tasks waiting for a handler (prefetched, not started) when each of the
        `concurrency` handlers has run its task for `GIVE_BACK` seconds or more at `now`
        (monotonic): none is about to free a slot for them, so they are better given back.
        Then the prefetch stops, as after a slow run, until the handlers are quick again."""
        with self._changed:
            waiting: list[TaskContext] = []
            busy = 0
            for ctx in self._hand.values():
                if ctx.stopped:
                    continue
                if ctx.in_hand.handler_started is None:
                    waiting.append(ctx)
                elif ctx.in_hand.handler_running and now - ctx.in_hand.handler_started >= GIVE_BACK:
                    busy += 1
            if not waiting or busy < self.concurrency:
                return []
            self._quick_runs = 0
            return waiting

    def stop_prefetching(self) -> None:
        """Hold no more than `concurrency` tasks from now on (`run(once=True)`)."""
        with self._changed:
            self.prefetch = 0

    def free(self) -> int:
        """Slots a lease could claim now."""
        with self._changed:
            return self._free()

    def claim(self, done: Sequence[TaskContext] = (), *, lease: bool = True) -> Claim:
        """Claim the free slots (up to `CLAIM_LIMIT`) for a lease (none unless `lease`), after
        freeing the slots of `done` (their outcomes are written with the lease): in one step,
        so no other lease takes them meanwhile. With an empty claim, `done` stay in hand until
        written. The caller ends the claim with `take()`, `unclaim()` or `drop()`."""
        with self._changed:
            for ctx in done:
                self._hand.pop(ctx.task.pk, None)
            size = min(self._free(), CLAIM_LIMIT) if lease else 0
            if not size:  # nothing to pass their slots to: in hand until written
                self._hand.update((ctx.task.pk, ctx) for ctx in done)
                return Claim(0)
            self._claimed += size
            return Claim(size, tuple(done))

    def take(self, claim: Claim, tasks: Sequence[Task], worker: Worker) -> list[TaskContext]:
        """Put the `tasks` leased into `claim`'s slots in hand, release the rest of the claim;
        return their contexts. (Whether to lease again into the rest is the caller's call.)"""
        started = [TaskContext(task, worker) for task in tasks]
        for ctx in started:
            # The heartbeat of what is in hand writes their checkpoints.
            ctx.pending_checkpoint.rides_heartbeats = True
        with self._changed:
            self._claimed -= claim.size
            for ctx in started:
                self._hand[ctx.task.pk] = ctx
            self._leased += len(started)
            self._changed.notify_all()
        if self._on_take is not None:  # in hand first: the watchdog watches what is in hand
            for ctx in started:
                self._on_take(ctx)
        self.hooks.note("leased", len(started))
        for ctx in started:
            task = ctx.task
            logger.debug(
                "%s leased %s (queue %s, lease %d)",
                worker.name,
                task.rn,
                task.queue,
                task.leases,
            )
        return started

    def unclaim(self, claim: Claim) -> None:
        """Undo `claim`: its outcomes were not written, their tasks are in hand again."""
        with self._changed:
            self._claimed -= claim.size
            for ctx in claim.done:
                self._hand[ctx.task.pk] = ctx

    def drop(self, claim: Claim) -> None:
        """End `claim` with nothing leased and its `done` out of hand (whether their outcomes
        were written is not known: their slots are free either way)."""
        with self._changed:
            self._claimed -= claim.size
            self._changed.notify_all()
        self._on_free()

    def release(self, done: Sequence[TaskContext]) -> None:
        """Free the slots of `done`: their outcomes are written, or they were given up."""
        with self._changed:
            for ctx in done:
                self._hand.pop(ctx.task.pk, None)
            self._changed.notify_all()
        self._on_free()

    # -- what is in hand --------------------------------------------------------------------

    def in_hand(self) -> list[TaskContext]:
        """The tasks leased whose outcomes are not written yet."""
        with self._changed:
            return list(self._hand.values())

    def holds(self, ctx: TaskContext) -> bool:
        """Whether `ctx` is in hand (not finished, given up or leased again since)."""
        with self._changed:
            return self._hand.get(ctx.task.pk) is ctx

    def held(self) -> int:
        """How many tasks are in hand."""
        with self._changed:
            return len(self._hand)

    def taken(self) -> int:
        """Tasks in hand, and slots a lease in progress may fill."""
        with self._changed:
            return len(self._hand) + self._claimed

    def only(self, ctx: TaskContext) -> bool:
        """Whether `ctx` is the only task in hand and no lease is in progress."""
        with self._changed:
            return len(self._hand) == 1 and ctx.task.pk in self._hand and not self._claimed

    def leased(self) -> int:
        """Tasks leased since the worker started."""
        with self._changed:
            return self._leased

    def exhausted(self) -> bool:
        """Whether `max_tasks` tasks were leased, or `retire()` was called: the worker leases
        no more."""
        with self._changed:
            if self._retired:
                return True
        return self.max_tasks is not None and self.leased() >= self.max_tasks

    def retire(self) -> None:
        """Lease no more: every later claim is empty (the tasks in hand are finished)."""
        with self._changed:
            self._retired = True
            self._changed.notify_all()
        self._on_free()

    def running(self) -> list[str]:
        """The rns of the tasks in hand whose handlers are still running."""
        with self._changed:
            return [ctx.task.rn for ctx in self._hand.values() if ctx.in_hand.handler_running]

    def wait_until_empty(self, give_up: Callable[[], bool]) -> None:
        """Wait until no task is in hand and no lease in progress, or `give_up()`."""
        with self._changed:
            while (self._hand or self._claimed) and not give_up():
                self._changed.wait(0.05)
