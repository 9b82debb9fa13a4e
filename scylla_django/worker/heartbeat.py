"""The heartbeat: every `heartbeat_interval` (at once when told a task of this worker may be
cancelled) extend every live lease in one statement, sending progress and telling which
handlers have started (their reservations become full leases); stop a task whose lease the
database refused (cancelled, lost, aborted by the monitor) or whose heartbeats failed
`SCYLLA['HEARTBEAT_FAILURES']` times in a row (the worker then gives it up rather than run on
unsupervised). Yields go through here too, so that a heartbeat never undoes one, and so does
the start a worker records before it runs a task whose earlier lease expired unstarted."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from django.db import Error as DatabaseError
from django.db import connections

from .. import db, tracing
from ..conf import scylla_settings
from ..exceptions import (
    InvalidTransition,
    LeaseLost,
    ScyllaError,
    TaskTimedOut,
    WorkerStopping,
)
from ..handlers import TaskContext
from ..models import Task, Worker
from .database import WorkerConnection
from .hooks import WorkerHooks
from .options import WorkerOptions
from .watchdog import Watchdog

logger = logging.getLogger("scylla_django")


class Heartbeat:
    """Keeps the leases of `worker` on the tasks `in_hand()` returns alive, and gives them
    back. `run()` is the heartbeat thread; `tick()`, called after each pass, is the place of
    periodic chores (the summary line)."""

    def __init__(
        self,
        options: WorkerOptions,
        worker: Worker,
        in_hand: Callable[[], list[TaskContext]],
        tick: Callable[[], None],
        connection: WorkerConnection,
        watchdog: Watchdog | None = None,
        hooks: WorkerHooks | None = None,
    ) -> None:
        self.options = options
        self.watchdog = watchdog
        self.hooks = hooks if hooks is not None else WorkerHooks()
        self.worker = worker
        self.connection = connection
        self._in_hand = in_hand
        self._tick = tick
        self._lock = threading.Lock()  # a heartbeat pass and a yield never overlap
        self._now = threading.Event()  # heartbeat now: a task of ours may be cancelled
        self._done = threading.Event()
        self._look = False  # `look_now()` was called
        self._beat_asked = False  # `beat_now()` was called

    def beat_now(self) -> None:
        """Heartbeat at once."""
        self._beat_asked = True
        self._now.set()

    def close(self) -> None:
        """End `run()` after the pass in progress, if any."""
        self._done.set()
        self._now.set()

    def look_now(self) -> None:
        """Find out at once which tasks in hand this worker no longer holds (one of them may
        have been cancelled), with a read, and stop them: unlike a heartbeat, it writes
        nothing, so the ten workers of a hundred thousand held tasks told of a cancel at once
        read their leases rather than all rewrite them together."""
        self._look = True
        self._now.set()

    def run(self) -> None:
        interval = self.options.heartbeat_seconds
        next_touch = time.monotonic()
        next_beat = time.monotonic() + interval
        try:
            while not self._done.is_set():
                self._now.wait(max(0.0, next_beat - time.monotonic()))
                self._now.clear()
                if self._done.is_set():
                    return
                looking, self._look = self._look, False
                if looking and not self._beat_asked and time.monotonic() < next_beat:
                    self._look_up()
                    continue
                self._beat_asked = False
                next_beat = time.monotonic() + interval
                self._beat()
                now = time.monotonic()
                if now >= next_touch:
                    next_touch = now + interval * 0.9
                    try:
                        with self.connection.used():
                            self.worker.touch(load=self._load())
                    except DatabaseError:
                        self.connection.discard()
                self._tick()
        finally:
            connections.close_all()

    def _load(self) -> float | None:
        """The host's load, sent with the worker's liveness (None if it cannot be read)."""
        try:
            return float(self.options.load_reader())
        except (OSError, ValueError):
            return None

    def give_back(self, contexts: Sequence[TaskContext], why: str | None = None) -> None:
        """Yield the leases of `contexts` not yielded yet, between heartbeat passes: in one
        statement on PostgreSQL, however many there are. `why` is what their handlers are
        told (WorkerStopping; default: the worker is stopping)."""
        why = why or f"{self.worker.name} is stopping"
        with self._lock:  # a yield waits for this heartbeat, and is then not undone
            given = [ctx for ctx in contexts if not ctx.in_hand.yielded]
            # All stopped first: a prefetched task is not started while the others are yielded.
            for ctx in given:
                ctx.in_hand.yielded = True  # first: a handler returning now still gets its outcome
                ctx.stop(WorkerStopping(why, rn=ctx.task.rn))
            if given:
                self._yield(given)

    def _yield(self, given: Sequence[TaskContext]) -> None:
        """Give the leases back (the caller holds `_lock`, so no heartbeat is in flight)."""
        using = self.options.using
        leases = {ctx.task.pk: ctx.task.leases for ctx in given}
        name = self.worker.name
        # The checkpoints the handlers kept for the heartbeat (stopped first, they keep none
        # after this): written before the leases are given back, where the next run finds them.
        held = {
            ctx.task.pk: (ctx.task.leases, kept[0])
            for ctx in given
            if (kept := ctx.pending_checkpoint.take())
        }
        try:
            with self.connection.used():
                if held:
                    Task.objects.using(using).save_cursors(self.worker, held)
                yielded = Task.objects.using(using).yield_many(self.worker, leases)
                refused = {pk: lease for pk, lease in leases.items() if pk not in yielded}
                errors = Task.objects.using(using).refusals(self.worker, refused) if refused else {}
        except DatabaseError as exc:
            self.connection.discard()
            logger.warning("%s could not yield %d task(s): %s", name, len(given), exc)
            return
        for ctx in given:
            task = ctx.task
            if task.pk in yielded:
                logger.debug("%s yielded %s (queue %s)", name, task.rn, task.queue)
            else:
                logger.warning("%s could not yield %s: %s", name, task.rn, errors.get(task.pk))
        if yielded:
            logger.info("%s yielded %d task(s)", name, len(yielded))
        self.hooks.note("yielded", len(yielded))

    def record_start(self, ctx: TaskContext) -> bool:
        """Tell the database, before `ctx`'s handler runs, that it starts (a heartbeat of its
        lease alone, reporting the start): its reservation becomes a full lease, which counts
        toward `MAX_LEASES` if it expires. Whether the handler may run: False when the lease
        was refused (the task is stopped with the reason) or the write failed (the task is
        stopped with LeaseLost, and its reservation expires unstarted).

        A worker records the start of a task whose earlier lease expired unstarted
        (`Task.unstarted`), rather than leave it to the next heartbeat: a handler that kills
        its worker at once would otherwise never be known to have started, and never end."""
        using = self.options.using
        pk = ctx.task.pk
        with self._lock:  # not beside a heartbeat pass or a yield
            if ctx.stopped:
                return False
            sent = time.monotonic()
            try:
                with self.connection.used():
                    tasks = Task.objects.using(using)
                    extended = tasks.heartbeat_many(
                        self.worker,
                        {pk: (ctx.task.leases, None)},
                        lease_length=self.options.lease_length,
                        started={pk},
                        reservation=self.options.reservation,
                    )
                    errors = (
                        {} if pk in extended else tasks.refusals(self.worker, {pk: ctx.task.leases})
                    )
            except DatabaseError as exc:
                self.connection.discard()
                logger.warning(
                    "%s could not record the start of %s: %s", self.worker.name, ctx.task.rn, exc
                )
                ctx.stop(LeaseLost(f"its start could not be recorded ({exc})", rn=ctx.task.rn))
                return False
            if errors:
                logger.info("%s: %s", self.worker.name, errors[pk])
                ctx.stop(errors[pk])
                return False
            ctx.in_hand.start_recorded = True
            ctx.in_hand.failed_heartbeats = 0
            if self.watchdog is not None:
                self.watchdog.kept(ctx, sent)
        self.hooks.note("recorded")
        return True

    def _look_up(self) -> None:
        """Stop the tasks in hand whose leases this worker no longer holds (`look_now`)."""
        using = self.options.using
        with self._lock:
            live = [ctx for ctx in self._in_hand() if not ctx.stopped]
            leases = {ctx.task.pk: ctx.task.leases for ctx in live}
            if not leases:
                return
            try:
                with self.connection.used():
                    tasks = Task.objects.using(using)
                    lost = tasks.lost_leases(self.worker, leases)
                    refused = {pk: leases[pk] for pk in lost}
                    errors = tasks.refusals(self.worker, refused) if refused else {}
            except Exception as exc:  # the next heartbeat tells instead
                self.connection.discard()
                logger.warning("%s: looking up its leases failed: %r", self.worker.name, exc)
                return
        self._stop_refused([ctx for ctx in live if ctx.task.pk in errors], errors)

    def _stop_refused(
        self, contexts: Sequence[TaskContext], errors: Mapping[int, ScyllaError]
    ) -> None:
        """Stop each of `contexts` whose lease was refused, for the reason in `errors`."""
        for ctx in contexts:
            error = errors[ctx.task.pk]
            if type(error) is InvalidTransition and not ctx.in_hand.handler_running:
                continue  # its outcome was written since we looked
            # Any other refusal means stop: cancelled, reset, aborted by the monitor, taken over.
            logger.info("%s: %s", self.worker.name, error)
            ctx.stop(error)

    def _beat(self) -> None:
        """Extend every live lease in one statement; stop the tasks whose lease was refused."""
        using = self.options.using
        max_failures = scylla_settings.HEARTBEAT_FAILURES
        with self._lock:
            # A task past its timeout is kept until its handler returns or the watchdog aborts it.
            live = [
                ctx
                for ctx in self._in_hand()
                if not ctx.stopped or isinstance(ctx.stop_reason, TaskTimedOut)
            ]
            if not live:
                return
            sent = time.monotonic()
            leases = {
                ctx.task.pk: (
                    ctx.task.leases,
                    None if ctx.progress == ctx.in_hand.sent_progress else ctx.progress,
                )
                for ctx in live
            }
            # The checkpoints made since the last heartbeat ride it (`ctx.checkpoint()`).
            kept = {
                ctx.task.pk: (ctx, held) for ctx in live if (held := ctx.pending_checkpoint.take())
            }
            cursors = {pk: held[0] for pk, (_, held) in kept.items()}
            # The handlers started since the last heartbeat: their reservations become leases.
            started = {
                ctx.task.pk
                for ctx in live
                if ctx.in_hand.handler_started is not None and not ctx.in_hand.start_recorded
            }
            try:
                with self.connection.used():
                    db.use_worker_plans(connections[using])  # the worker's own connection
                    extended = Task.objects.using(using).heartbeat_many(
                        self.worker,
                        leases,
                        lease_length=self.options.lease_length,
                        started=started,
                        reservation=self.options.reservation,
                        cursors=cursors,
                    )
                    refused = {pk: leases[pk][0] for pk in leases if pk not in extended}
                    errors = (
                        Task.objects.using(using).refusals(self.worker, refused) if refused else {}
                    )
            except Exception as exc:  # the database, mostly; never let this thread die
                self.connection.discard()
                for ctx, held in kept.values():
                    ctx.pending_checkpoint.put_back(held)  # for the next heartbeat
                for ctx in live:
                    ctx.in_hand.failed_heartbeats += 1
                    if ctx.in_hand.failed_heartbeats >= max_failures:
                        ctx.stop(
                            LeaseLost(
                                f"{max_failures} heartbeats in a row failed; giving the task up",
                                rn=ctx.task.rn,
                            )
                        )
                logger.warning(
                    "%s: heartbeat of %d task(s) failed (%d/%d): %r",
                    self.worker.name,
                    len(live),
                    max(ctx.in_hand.failed_heartbeats for ctx in live),
                    max_failures,
                    exc,
                )
                return
        beaten: set[int] = set()
        for ctx in live:
            if ctx.task.pk in extended:
                ctx.in_hand.failed_heartbeats = 0
                if ctx.task.pk in started:
                    ctx.in_hand.start_recorded = True
                progress = leases[ctx.task.pk][1]
                if progress is not None:
                    ctx.in_hand.sent_progress = progress
                if self.watchdog is not None:
                    self.watchdog.kept(ctx, sent)
                if ctx.span is not None and id(ctx.span) not in beaten:
                    beaten.add(id(ctx.span))  # a batch's members share one span
                    tracing.heartbeat(ctx.span, ctx.progress)
        self._stop_refused([ctx for ctx in live if ctx.task.pk not in extended], errors)
        self.hooks.note("beat")
