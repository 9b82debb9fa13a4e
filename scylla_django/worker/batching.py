"""Batched execution (README, "Batched execution"): the tasks of a batch handler's queue
(`@handler("clean", batch_size=100, batch_wait=timedelta(seconds=1))`) are leased up to
`batch_size` at a time in one statement and handed to one call of the handler, as a list of
their contexts.

A `Batcher` serves one batch queue on a thread of its own, one batch at a time, apart from the
worker's `concurrency` slots. It waits for a batch to fill: once a task is ready it looks again
every `FILL_POLL` seconds until `batch_size` are ready or `batch_wait` has passed, then leases.
Each member keeps a lease of its own: the worker's heartbeat extends it (its progress, its
cancellation: a cancelled member's `ctx.check()` raises, the others run on), its run-time limit
caps it, and `ctx.fenced()` fences on it. Each gets its own outcome, written for the whole
batch in one statement, every row fenced on its own lease: what the handler decided for it
(`ctx.complete(result)`, `ctx.abort(exc)`), else, when the handler returned, its result (a
mapping of rn to result; None for a member it does not name), or, when the handler raised, the
abort of that exception. A member that was stopped (cancelled, lease lost) gets nothing
written, as any stopped task; one past its run-time limit is aborted with `timeout`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import Error as DatabaseError
from django.db import connections
from django.db.models import Q

from .. import db
from ..enums import Status
from ..exceptions import (
    Abort,
    LeaseLost,
    TaskCancelled,
    TaskTimedOut,
    WorkerStopping,
    error_record,
    exception_error,
)
from ..handlers import Batching, TaskContext
from ..models import Outcome, Task, Worker
from ..resources import ThreadMeter
from ..validation import invalid_result, validate_json
from .database import WorkerConnection, close_handler_connections, retry
from .options import WorkerOptions
from .watchdog import Watchdog

logger = logging.getLogger("scylla_django")

#: Seconds between looks at a batch that is filling up (once one of its tasks is ready).
FILL_POLL = 0.05


def batch_queues(options: WorkerOptions) -> list[str]:
    """The queues of `options` whose handlers take batches (their batchers lease them)."""
    return [q for q in options.queues if options.registry.batching_of(q) is not None]


def plain_queues(options: WorkerOptions) -> list[str]:
    """The queues of `options` whose handlers take one task (the slots' leases take them)."""
    return [q for q in options.queues if options.registry.batching_of(q) is None]


class Batcher:
    """Leases and runs the batches of one batch queue, on the thread that calls `run()`, until
    `stopping` is set (after one batch, or none ready, with `once`)."""

    def __init__(
        self,
        options: WorkerOptions,
        worker: Worker,
        queue: str,
        *,
        connection: WorkerConnection,
        watchdog: Watchdog,
        stopping: threading.Event,
        once: bool = False,
    ) -> None:
        batching = options.registry.batching_of(queue)
        assert batching is not None, f"{queue} has no batch handler"
        self.batching: Batching = batching
        self.options = options
        self.worker = worker
        self.queue = queue
        self.connection = connection
        self.watchdog = watchdog
        self.stopping = stopping
        self.once = once
        self._lock = threading.Lock()
        self._hand: list[TaskContext] = []
        self._wakeup = threading.Event()
        self.batches = 0
        """Batches run so far."""

    def in_hand(self) -> list[TaskContext]:
        """The members of the batch leased and not finished yet."""
        with self._lock:
            return list(self._hand)

    def wake(self) -> None:
        """Look for ready tasks now (tasks of the queue became ready)."""
        self._wakeup.set()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                if not self._filled():
                    if self.once:
                        return
                    continue
                contexts = retry(
                    self._lease, "lease a batch", using=self.options.using, stop=self.stopping
                )
                if contexts:
                    self._run_batch(contexts)
                if self.once:
                    return
        except Exception:  # a bug of ours: log it; the leases in hand expire and are reset
            logger.exception("%s: the batches of %s failed", self.worker.name, self.queue)
        finally:
            close_handler_connections()

    # -- leasing ------------------------------------------------------------------------------

    def _filled(self) -> bool:
        """Wait until a task is ready, then until the batch is full or `batch_wait` has passed
        since; True then (False when nothing became ready within a poll interval)."""
        first: float | None = None
        size, wait = self.batching.size, self.batching.wait.total_seconds()
        while not self.stopping.is_set():
            try:
                ready = self._ready(size)
            except DatabaseError as exc:
                self.connection.discard()
                logger.warning("%s cannot look for a batch (%s)", self.worker.name, exc)
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
        """Lease up to `batch_size` tasks of the queue in one statement; return them in hand."""
        using = self.options.using
        try:
            with self.connection.used():
                db.use_worker_plans(connections[using])
                tasks = Task.objects.using(using).lease(
                    self.worker,
                    [self.queue],
                    limit=self.batching.size,
                    lease_length=self.options.lease_length,
                )
        except DatabaseError:
            self.connection.discard()
            raise
        contexts = [TaskContext(task, self.worker) for task in tasks]
        for ctx in contexts:
            ctx.batched = True
            self.watchdog.track(ctx)  # its run-time limit caps its lease; lease keeping
        with self._lock:
            self._hand = contexts
        if contexts:
            logger.debug(
                "%s leased a batch of %d on %s", self.worker.name, len(contexts), self.queue
            )
        return contexts

    # -- running ------------------------------------------------------------------------------

    def _run_batch(self, contexts: list[TaskContext]) -> None:
        """Call the handler once with the members still live, then write every outcome."""
        handler: Any = self.options.registry.get(self.queue)  # takes the list of contexts
        assert handler is not None
        live = [ctx for ctx in contexts if not ctx.stopped]
        returned: Any = None
        raised: BaseException | None = None
        meter = ThreadMeter()
        started = time.monotonic()
        for ctx in live:
            ctx.handler_running = True
        try:
            if live:
                if inspect.iscoroutinefunction(handler):
                    returned = asyncio.run(handler(live))
                else:
                    returned = handler(live)
        except BaseException as exc:  # the handler's outcome, never ours
            raised = exc
            logger.warning("%s: batch handler of %s raised %r", self.worker.name, self.queue, exc)
        finally:
            for ctx in live:
                ctx.handler_running = False
        close_handler_connections()
        duration = time.monotonic() - started
        usage = meter.usage()
        share = None if usage.cpu_time is None or not live else usage.cpu_time / len(live)
        outcomes = []
        for ctx in live:
            outcome = self._outcome(ctx, returned, raised)
            if outcome is not None and ctx.end():
                outcomes.append(
                    Outcome(
                        ctx.task.pk,
                        ctx.task.leases,
                        outcome[0],
                        errors=outcome[1],
                        children=tuple(ctx.children) if outcome[1] is None else (),
                        duration=duration,
                        cpu_time=share,
                        task=ctx.task,
                    )
                )
        self._write(outcomes)
        self.batches += 1
        with self._lock:
            self._hand = []

    def _outcome(
        self, ctx: TaskContext, returned: Any, raised: BaseException | None
    ) -> tuple[Any, list[dict[str, Any]] | None] | None:
        """What to write for one member: (result, None) or (None, errors); None for none."""
        reason = ctx.stop_reason
        if isinstance(reason, TaskTimedOut) and not ctx.yielded:
            return None, [reason.as_error()]
        if ctx.stopped and not ctx.yielded:
            return None  # cancelled or lost: its lease is not ours to end
        if ctx.decision is not None:
            result, errors = ctx.decision
        elif raised is not None:
            if isinstance(raised, TaskCancelled | LeaseLost | WorkerStopping) and (
                ctx.stopped or raised.rn == ctx.task.rn
            ):
                return None  # a stop let through (a shutdown's yield): not the member's failure
            result, errors = None, [_error(raised)]
        elif returned is None or isinstance(returned, Mapping):
            result, errors = None if returned is None else returned.get(ctx.task.rn), None
        else:
            kind = type(returned).__name__
            detail = f"a batch handler returns None or a mapping of rn to result, not {kind}"
            return None, [error_record("invalid_result", detail)]
        if errors is None:
            try:
                result = validate_json(result, "result", allow_null=True)
            except ValidationError as exc:
                return None, [invalid_result(exc)]
        return result, errors

    def _write(self, outcomes: Sequence[Outcome]) -> None:
        """Write the batch's outcomes in one statement (each row fenced on its own lease),
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

        try:  # once even when stopping: a batch that ended within the grace period counts
            written: set[int] | None = write()
        except DatabaseError as exc:
            logger.warning("%s cannot write a batch's outcomes (%s)", self.worker.name, exc)
            written = retry(write, "write a batch's outcomes", using=using, stop=self.stopping)
        if written is None:
            logger.warning(
                "%s: the outcomes of a batch of %d on %s were not written (stopping)",
                self.worker.name,
                len(outcomes),
                self.queue,
            )
            return
        refused = len(outcomes) - len(written)
        logger.debug(
            "%s finished a batch on %s: %d written, %d refused (cancelled or lost meanwhile)",
            self.worker.name,
            self.queue,
            len(written),
            refused,
        )


def _error(exc: BaseException) -> dict[str, Any]:
    """The error of a batch member aborted because the handler raised `exc`."""
    if isinstance(exc, Abort):
        return exc.as_error()
    return exception_error(exc)


def with_batches(
    in_hand: Callable[[], list[TaskContext]], batchers: Sequence[Batcher]
) -> Callable[[], list[TaskContext]]:
    """`in_hand()` with the members of the batches in hand (what the heartbeat keeps)."""
    if not batchers:
        return in_hand
    return lambda: in_hand() + [ctx for b in batchers for ctx in b.in_hand()]
