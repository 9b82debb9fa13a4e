"""The lease loop: lease as many tasks as there are free slots, in one statement, whenever a
slot is freed, tasks become ready (a LISTEN notification) or `poll_interval` passes, and hand
them to the handlers (pull model: a worker never holds more than its concurrency and its
prefetch). Prefetched tasks that wait behind handlers all busy with slow tasks are given back
(`Slots.stuck`). While the host's load is over `--max-load` it leases nothing (`LoadGate`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from django.db import Error as DatabaseError
from django.db import connections

from .. import db
from ..handlers import TaskContext
from ..models import Task, Worker
from .bundles import plain_queues
from .database import WorkerConnection
from .execution import Execution
from .hooks import WorkerHooks
from .load import LoadGate
from .options import WorkerOptions
from .slots import GIVE_BACK, Claim, Slots

logger = logging.getLogger("scylla_django")


class LeaseLoop:
    """Leases into the free `slots` of `worker` and dispatches the tasks to `execution`, on the
    thread that calls `run()`, until `stopping` is set (or `max_tasks` are leased)."""

    def __init__(
        self,
        options: WorkerOptions,
        worker: Worker,
        *,
        slots: Slots,
        execution: Execution,
        stopping: threading.Event,
        wakeup: threading.Event,
        connection: WorkerConnection,
        give_back: Callable[[Sequence[TaskContext], str], None] | None = None,
        hooks: WorkerHooks | None = None,
        load: LoadGate | None = None,
    ) -> None:
        self.options = options
        self.hooks = hooks if hooks is not None else WorkerHooks()
        self.load = load if load is not None else LoadGate(options, worker, connection)
        self.worker = worker
        self.connection = connection
        self.slots = slots
        self.execution = execution
        self.stopping = stopping
        self._wakeup = wakeup
        self._give_back = give_back
        # A bundle handler's queue is leased by its bundler (bundles.py), not here.
        self.queues = plain_queues(options)

    def run(self, *, once: bool = False) -> None:
        """Lease until stopped; with `once`, lease once (up to `concurrency` tasks) and
        return."""
        options = self.options
        failures = db.DatabaseRetry(options.using)
        waiting = False  # since the last pass that leased a task
        while not self.stopping.is_set():
            if self.slots.exhausted() or (once and not self.queues):
                break
            self.hooks.note("passes")
            self._wakeup.clear()  # before leasing: a wake-up during the lease is not lost
            if self.load.over():
                self.hooks.note("held_back")
                self._wakeup.wait(self.options.poll_interval)
                continue
            free = self.slots.free()
            if free > 0 and self.slots.taken() > 0 and options.write_wait > 0:
                # Other handlers are busy and may be about to finish: a moment's wait lets one
                # lease fill several slots instead of one statement per slot.
                self.stopping.wait(options.write_wait)
            claim = self.slots.claim(lease=bool(self.queues))
            if claim.size > 0:
                try:
                    started = self._lease(claim)
                    failures.succeeded()
                except DatabaseError as exc:
                    self.connection.discard()
                    wait = failures.failed()
                    logger.warning(
                        "%s cannot lease (%s); retrying in %gs%s",
                        self.worker.name,
                        exc,
                        wait,
                        db.migrate_hint(exc),
                    )
                    self.stopping.wait(wait)
                    continue
                for ctx in started:
                    self.execution.dispatch(ctx)
                waiting = waiting and not started
                if once:
                    break
                if len(started) == claim.size:
                    continue  # there may be more ready tasks: fill the free slots at once
            wait = self._give_back_stuck()
            if not waiting:
                # Once per stretch without work: at -v 2, when the worker began waiting.
                logger.debug(
                    "%s waits for a task (a notification, or another look in %gs)",
                    self.worker.name,
                    wait,
                )
                waiting = True
            self.hooks.note("idle")
            self._wakeup.wait(wait)

    def _give_back_stuck(self) -> float:
        """Give back the prefetched tasks waiting behind handlers that are all busy with slow
        tasks; return how long to wait for a wake-up (shorter while tasks wait for a
        handler: they are looked at again within `GIVE_BACK` seconds)."""
        if self._give_back is None or not self.execution.waiting():
            return self.options.poll_interval
        stuck = self.slots.stuck(time.monotonic())
        if stuck:
            name = self.worker.name
            logger.info(
                "%s gives back %d prefetched task(s): its handlers are all busy with slow tasks",
                name,
                len(stuck),
            )
            self._give_back(stuck, f"given back by {name}, whose handlers are busy")
        return min(self.options.poll_interval, GIVE_BACK)

    def _lease(self, claim: Claim) -> list[TaskContext]:
        """Lease up to `claim.size` tasks into the slots claimed for them (released whatever
        happens); return their contexts, in hand from now on."""
        tasks: list[Task] = []
        try:
            using = self.options.using
            with self.connection.used():
                db.use_worker_plans(connections[using])  # a connection of the worker's own
                tasks = Task.objects.using(using).lease(
                    self.worker,
                    self.queues,
                    limit=claim.size,
                    lease_length=self.options.lease_length,
                    timeouts=self.options.registry.queue_timeouts(self.queues),
                    timeout_grace=self.options.timeout_grace,
                    # Leased beside others, a task may wait for a handler: a reservation
                    # until the heartbeat reports its start.
                    reservation=self.options.reservation,
                )
                # Now and then, each queue's lease floor up to its first ready task, so that
                # the next leases start their walks there (`Driver.raise_floors`). A floor
                # left where it was costs walks, not tasks: a failure is only logged.
                try:
                    db.driver(using).raise_floors(self.queues)
                except DatabaseError as exc:
                    logger.warning("%s cannot raise its lease floors (%s)", self.worker.name, exc)
        finally:
            started = self.slots.take(claim, tasks, self.worker)
        return started
