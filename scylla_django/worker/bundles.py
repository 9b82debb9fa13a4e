"""Bundled execution (docs/howto/bundle-handlers.md): the tasks of a bundle handler's queue
(`@handler("clean", bundle_size=100, bundle_wait=timedelta(seconds=1))`) are leased up to
`bundle_size` at a time in one statement and handed to one call of the handler, as a list of
their contexts.

A `Bundler` serves one bundle queue on a thread of its own, one bundle at a time, apart from the
worker's `concurrency` slots. It waits for a bundle to fill: once a task is ready it looks again
every `FILL_POLL` seconds until `bundle_size` are ready or `bundle_wait` has passed, then leases.
Each member keeps a lease of its own: the worker's heartbeat extends it (its progress, its
cancellation: a cancelled member's `ctx.check()` raises, the others run on), its run-time limit
caps it, and `ctx.fenced()` fences on it. The bundle is run by the worker's `Execution`
(`run_bundle()`, which says what each member's outcome is); the outcomes are written for the
whole bundle in one statement, every row fenced on its own lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from django.db import Error as DatabaseError
from django.db import connections
from django.db.models import Q

from .. import db
from ..enums import Status
from ..handlers import Bundling, TaskContext
from ..models import Outcome, Task, Worker
from .database import WorkerConnection, close_handler_connections, retry
from .execution import Execution
from .hooks import WorkerHooks
from .load import LoadGate
from .options import WorkerOptions
from .watchdog import Watchdog

logger = logging.getLogger("scylla_django")

#: Seconds between looks at a bundle that is filling up (once one of its tasks is ready).
FILL_POLL = 0.05


def bundle_queues(options: WorkerOptions) -> list[str]:
    """The queues of `options` whose handlers take bundles (their bundlers lease them)."""
    return [q for q in options.queues if options.registry.bundling_of(q) is not None]


def plain_queues(options: WorkerOptions) -> list[str]:
    """The queues of `options` whose handlers take one task (the slots' leases take them)."""
    return [q for q in options.queues if options.registry.bundling_of(q) is None]


class Bundler:
    """Leases the bundles of one bundle queue and runs them with `execution`, on the thread that
    calls `run()`, until `stopping` is set (after one bundle, or none ready, with `once`)."""

    def __init__(
        self,
        options: WorkerOptions,
        worker: Worker,
        queue: str,
        *,
        execution: Execution,
        connection: WorkerConnection,
        watchdog: Watchdog,
        stopping: threading.Event,
        once: bool = False,
        load: LoadGate | None = None,
        hooks: WorkerHooks | None = None,
    ) -> None:
        bundling = options.registry.bundling_of(queue)
        if bundling is None:
            raise RuntimeError(f"{queue} has no bundle handler")
        self.bundling: Bundling = bundling
        self.options = options
        self.worker = worker
        self.queue = queue
        self.execution = execution
        self.connection = connection
        self.watchdog = watchdog
        self.stopping = stopping
        self.once = once
        self.load = load if load is not None else LoadGate(options, worker, connection)
        self.hooks = hooks if hooks is not None else WorkerHooks()
        self._lock = threading.Lock()
        self._hand: list[TaskContext] = []
        self._wakeup = threading.Event()
        self.bundles = 0
        """Bundles run so far."""

    def in_hand(self) -> list[TaskContext]:
        """The members of the bundle leased and not finished yet."""
        with self._lock:
            return list(self._hand)

    def wake(self) -> None:
        """Look for ready tasks now (tasks of the queue became ready)."""
        self._wakeup.set()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                if self.load.over():  # `--max-load`: nothing leased while the host is loaded
                    self.hooks.note("held_back")
                    self._wakeup.wait(self.options.poll_interval)
                    self._wakeup.clear()
                    continue
                if not self._filled():
                    if self.once:
                        return
                    continue
                contexts = retry(
                    self._lease, "lease a bundle", using=self.options.using, stop=self.stopping
                )
                if contexts:
                    self._run_bundle(contexts)
                if self.once:
                    return
        except Exception:  # a bug of ours: log it; the leases in hand expire and are reset
            logger.exception("%s: the bundles of %s failed", self.worker.name, self.queue)
        finally:
            close_handler_connections()

    # -- leasing ------------------------------------------------------------------------------

    def _filled(self) -> bool:
        """Wait until a task is ready, then until the bundle is full or `bundle_wait` has passed
        since; True then (False when nothing became ready within a poll interval)."""
        first: float | None = None
        size, wait = self.bundling.size, self.bundling.wait.total_seconds()
        while not self.stopping.is_set():
            try:
                ready = self._ready(size)
            except DatabaseError as exc:
                self.connection.discard()
                logger.warning("%s cannot look for a bundle (%s)", self.worker.name, exc)
                ready = 0
            if ready == 0:
                if first is not None or self.once:
                    return first is not None  # taken by another worker meanwhile: lease all
                self._wakeup.wait(self.options.poll_interval)
                self._wakeup.clear()
                return False
            now = time.monotonic()
            if first is None:
                first = now
                if ready < size:
                    logger.debug(
                        "%s: %d of a bundle of %d ready in %s; waiting up to %gs for more",
                        self.worker.name,
                        ready,
                        size,
                        self.queue,
                        wait,
                    )
            if ready >= size or now >= first + wait:
                return True
            self.stopping.wait(min(FILL_POLL, first + wait - now))
        return False

    def _ready(self, size: int) -> int:
        """How many tasks of the queue look ready, up to `size` (the lease decides: keys,
        pauses and expiries are its to judge)."""
        with self.connection.used():
            return (
                Task.objects.using(self.options.using)
                .filter(queue=self.queue, status=Status.READY)
                .filter(Q(not_before__isnull=True) | Q(not_before__lte=db.Now()))
                .order_by()[:size]
                .count()
            )

    def _lease(self) -> list[TaskContext]:
        """Lease up to `bundle_size` tasks of the queue in one statement; return them in hand."""
        using = self.options.using
        try:
            with self.connection.used():
                db.use_worker_plans(connections[using])
                tasks = Task.objects.using(using).lease(
                    self.worker,
                    [self.queue],
                    limit=self.bundling.size,
                    lease_length=self.options.lease_length,
                    timeouts=self.options.registry.queue_timeouts([self.queue]),
                    timeout_grace=self.options.timeout_grace,
                )
        except DatabaseError:
            self.connection.discard()
            raise
        contexts = [TaskContext(task, self.worker) for task in tasks]
        for ctx in contexts:
            ctx.bundled = True
            # The heartbeat of the bundle writes their checkpoints.
            ctx.pending_checkpoint.rides_heartbeats = True
            self.watchdog.track(ctx)  # its run-time limit; lease keeping
        with self._lock:
            self._hand = contexts
        self.execution.hooks.note("leased", len(contexts))
        if contexts:
            logger.debug(
                "%s leased a bundle of %d on %s", self.worker.name, len(contexts), self.queue
            )
        return contexts

    # -- running ------------------------------------------------------------------------------

    def _run_bundle(self, contexts: list[TaskContext]) -> None:
        """Call the handler once with the members still live, then write every outcome."""
        outcomes = self.execution.run_bundle(contexts)
        self._write([outcome for _, outcome in outcomes])
        self.bundles += 1
        with self._lock:
            self._hand = []
        self.execution.hooks.note("written", len(outcomes))

    def _write(self, outcomes: Sequence[Outcome]) -> None:
        """Write the bundle's outcomes in one statement (each row fenced on its own lease),
        once, then again through a database outage until the worker stops."""
        if not outcomes:
            return
        using = self.options.using

        def write() -> set[int]:
            try:
                with self.connection.used():
                    return Task.objects.using(using).finish_many(self.worker, outcomes)
            except DatabaseError:
                self.connection.discard()
                raise

        try:  # once even when stopping: a bundle that ended within the grace period counts
            written: set[int] | None = write()
        except DatabaseError as exc:
            logger.warning("%s cannot write a bundle's outcomes (%s)", self.worker.name, exc)
            written = retry(write, "write a bundle's outcomes", using=using, stop=self.stopping)
        if written is None:
            logger.warning(
                "%s: the outcomes of a bundle of %d on %s were not written (stopping)",
                self.worker.name,
                len(outcomes),
                self.queue,
            )
            return
        refused = len(outcomes) - len(written)
        logger.debug(
            "%s finished a bundle on %s: %d written, %d refused (cancelled or lost meanwhile)",
            self.worker.name,
            self.queue,
            len(written),
            refused,
        )


def with_bundles(
    in_hand: Callable[[], list[TaskContext]], bundlers: Sequence[Bundler]
) -> Callable[[], list[TaskContext]]:
    """`in_hand()` with the members of the bundles in hand (what the heartbeat keeps)."""
    if not bundlers:
        return in_hand
    return lambda: in_hand() + [ctx for b in bundlers for ctx in b.in_hand()]
