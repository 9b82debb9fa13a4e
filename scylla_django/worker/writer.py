"""The outcome writer: ends the leases of the tasks whose handlers have run, coalescing their
outcomes into writes.

Outcomes wait in a queue for the writer thread, which writes them together, each row fenced on
its lease, and leases into the slots they free in the same statement (`finish_and_lease`);
through a database outage it keeps retrying them until the database answers or the grace
period of a shutdown ends. A handler thread whose task is the only one in hand writes its
outcome itself, the same way, on a connection of its own, and runs the task it leased at once.

The fenced statements are `fenced_writes.py`'s; the write that refills the slots it frees,
`refills.py`'s; the retry of a failed write, and what an error that is not the database's costs
(never the task's: the slot is freed), `write_retry.py`'s; the counts and log lines of the
outcomes written, `write_reports.py`'s.

Before a handler starts, the outcomes waiting whose tasks' starts the database knows are
written first, at once: a handler that kills the worker would otherwise leave their leases to
expire as runs that count toward `MAX_LEASES` (the outcomes of tasks whose starts it does not
know cost nothing: their leases expire unstarted). And a task whose earlier lease expired
unstarted has its start recorded before its handler runs (`Heartbeat.record_start`), so a
handler that kills its worker at once is still counted (docs/howto/crashes.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import Error as DatabaseError
from django.db import connections

from ..exceptions import ScyllaError
from ..handlers import TaskContext
from ..models import Outcome, Worker
from .database import WorkerConnection
from .execution import Execution
from .fenced_writes import FencedWrites
from .heartbeat import Heartbeat
from .options import WorkerOptions
from .outcomes import Outcomes
from .refills import Refills
from .slots import Slots
from .summary import Summary
from .write_reports import WriteReports
from .write_retry import WriteRetry

logger = logging.getLogger("scylla_django")


class OutcomeWriter:
    """Writes the outcomes handed to it, and, with `refill`, leases into the slots they free.

    `stopping` is set when the worker stops leasing; `grace_over` when the grace period of the
    shutdown is over (an outcome that cannot be written then is left to its lease's expiry);
    `wake` asks the lease loop to lease (a slot is free, or a task became ready meanwhile).
    """

    def __init__(
        self,
        options: WorkerOptions,
        worker: Worker,
        *,
        slots: Slots,
        execution: Execution,
        heartbeat: Heartbeat,
        summary: Summary,
        stopping: threading.Event,
        grace_over: threading.Event,
        wake: Callable[[], None],
        refill: bool,
        connection: WorkerConnection,
    ) -> None:
        self.options = options
        self.worker = worker
        self.slots = slots
        self.execution = execution
        self.heartbeat = heartbeat
        self.summary = summary
        self.stopping = stopping
        self.refill = refill
        self._outcomes: Outcomes = []
        self._ready = threading.Condition(threading.Lock())
        self._done = False
        self._hurry = False  # write what comes at once: the worker is stopping
        self._urgent = False  # write what waits at once: a handler is about to start
        self._writing = 0  # outcomes taken from `_outcomes` and not written yet
        # The tasks of the outcomes waiting or being written whose starts the database knows.
        self._recorded: set[int] = set()
        self.writes = FencedWrites(options, worker, connection)
        self.reports = WriteReports(worker, slots, summary)
        self.retry = WriteRetry(
            worker,
            self.writes,
            self.reports,
            slots=slots,
            summary=summary,
            connection=connection,
            grace_over=grace_over,
        )
        self.refills = Refills(
            worker,
            self.writes,
            self.retry,
            self.reports,
            slots=slots,
            execution=execution,
            heartbeat=heartbeat,
            stopping=stopping,
            wake=wake,
        )

    # -- what the handlers hand over --------------------------------------------------------

    def hand_over(self, ctx: TaskContext, outcome: Outcome | None) -> None:
        """Queue `ctx`'s outcome for the writer thread (or drop a task stopped meanwhile)."""
        if outcome is None:
            self.summary.count("stopped")
            self.slots.release([ctx])
            return
        self.slots.ran(outcome.duration)
        # The slot stays taken until the outcome is written: a task is the worker's until then.
        with self._ready:
            self._outcomes.append((ctx, outcome))
            if ctx.in_hand.start_recorded:
                self._recorded.add(ctx.task.pk)
            # The first wakes the writer; `write_size` waiting, or the last task in hand, flushes.
            if len(self._outcomes) in (1, self.options.write_size) or self._all_handled():
                self._ready.notify()

    def finish_here(self, ctx: TaskContext, outcome: Outcome | None) -> TaskContext | None:
        """On the thread that ran `ctx`: if it is the only task in hand and no outcome waits
        (no other outcome could join it), write the outcome and lease into the slot
        it frees; return the leased task this thread runs next, the others handed out.
        Otherwise queue the outcome for the writer thread.

        On PostgreSQL both are one statement (`finish_and_lease`), one commit; elsewhere the
        outcome is committed first. Either way the database never sees this worker hold more
        than `concurrency` running tasks. A database error leaves the outcome to the writer,
        which retries it, and the lease to the lease loop.
        """
        if outcome is None or not self.refill or not self._alone(ctx):
            self.hand_over(ctx, outcome)
            return None
        self.slots.ran(outcome.duration)
        outcomes = [(ctx, outcome)]
        # The finished task's slot passes straight to the lease: no other lease can take it.
        claim = self.slots.claim([ctx], lease=not self.stopping.is_set())
        if not claim.size:
            try:
                errors = self.writes.finish(outcomes)
            except (DatabaseError, ScyllaError) as exc:
                self.retry.not_written(exc, outcomes)
                self.hand_over(ctx, outcome)  # still in hand: the writer retries it
            except Exception:
                self.retry.failed_after_sending(outcomes)
                self.slots.release([ctx])
            else:
                self.reports.settle(outcomes, errors)
            return None
        started = self.refills.write(outcomes, claim)
        if started is None:  # still in hand: the writer retries it
            self.hand_over(ctx, outcome)
            return None
        mine = next((new for new in started if not self.execution.runs_on_loop(new)), None)
        for new in started:
            if new is not mine:
                self.execution.dispatch(new)
        return mine

    def give_up(self, ctx: TaskContext) -> None:
        """Free `ctx`'s slot after a failure of the worker's own: its outcome is lost."""
        self.slots.release([ctx])

    # -- before a handler starts ------------------------------------------------------------

    def start_needs_writes(self, ctx: TaskContext) -> bool:
        """Whether something must be written before `ctx`'s handler starts: an outcome
        waiting whose task's start the database knows, or `ctx`'s own start (its earlier
        lease expired unstarted). A look without a lock, on every handler's start."""
        return bool(self._recorded) or (not ctx.in_hand.start_recorded and ctx.task.unstarted > 0)

    def write_before_start(self, ctx: TaskContext) -> bool:
        """On the thread about to run `ctx`'s handler: have the outcomes waiting whose tasks'
        starts the database knows written (waiting a heartbeat interval at most: through an
        outage the handler is not held up longer), then record `ctx`'s start if its earlier
        lease expired unstarted; whether the handler may run."""
        self._write_now(self.options.heartbeat_seconds)
        if ctx.in_hand.start_recorded or ctx.task.unstarted == 0:
            return True
        return self.heartbeat.record_start(ctx)

    def _write_now(self, timeout: float) -> None:
        """Have the outcomes waiting written at once (no waits for more to join); return once
        none whose task's start the database knows is waiting or being written, or after
        `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._ready:
            if not self._recorded:
                return
            self._urgent = True
            self._ready.notify_all()
            while self._recorded:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._ready.wait(min(left, 0.05))

    def _alone(self, ctx: TaskContext) -> bool:
        if not self.slots.only(ctx):
            return False
        with self._ready:
            return not self._outcomes

    def _all_handled(self) -> bool:
        """Whether every task in hand has its outcome waiting to be written (the caller holds
        `_ready`)."""
        return len(self._outcomes) >= self.slots.held()

    # -- the writer thread ------------------------------------------------------------------

    def flush(self, timeout: float) -> None:
        """Write the outcomes waiting, and any handed over from now on, at once (no
        waits to fill up); return once none is waiting or being written, or after `timeout`
        seconds (the database is out: they are written when it is back, or their leases
        expire). Called on shutdown, before the tasks still in hand are yielded."""
        deadline = time.monotonic() + timeout
        with self._ready:
            self._hurry = True
            self._ready.notify_all()
            while self._outcomes or self._writing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._ready.wait(min(left, 0.05))

    def close(self) -> None:
        """End `run()` once the outcomes waiting are written."""
        with self._ready:
            self._done = True
            self._ready.notify_all()

    def run(self) -> None:
        """The writer thread: write the outcomes, many per statement, until `close()`."""
        write_size, write_wait = self.options.write_size, self.options.write_wait
        try:
            while True:
                with self._ready:
                    while not self._outcomes and not self._done:
                        self._ready.wait()
                    if not self._outcomes:
                        return
                    # Let more outcomes join for `write_wait`, unless `write_size` wait or no
                    # handler is still running (nothing more can come until these are written).
                    deadline = time.monotonic() + write_wait
                    while (
                        len(self._outcomes) < write_size
                        and not self._all_handled()
                        and not self._done
                        and not self._hurry
                        and not self._urgent
                    ):
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._ready.wait(left)
                    outcomes = self._outcomes[:write_size]
                    del self._outcomes[:write_size]
                    self._writing = len(outcomes)
                    self._urgent = self._urgent and bool(self._outcomes)
                try:
                    self._write(outcomes)
                except Exception:  # a bug of ours: never let it keep the slots or this thread
                    logger.exception(
                        "%s: writing %d outcome(s) failed", self.worker.name, len(outcomes)
                    )
                    self.slots.release([ctx for ctx, _ in outcomes])
                finally:
                    with self._ready:
                        self._writing = 0
                        if self._recorded:
                            self._recorded.difference_update(ctx.task.pk for ctx, _ in outcomes)
                        self._ready.notify_all()
        finally:
            connections.close_all()

    def _write(self, outcomes: Outcomes) -> None:
        """Write outcomes together, leasing into the slots they free (`Refills`), or
        alone, retrying through database errors until the grace period ends (`WriteRetry`)."""
        if self.refill and self.refills.write_and_dispatch(outcomes):
            return
        self.retry.write(outcomes)
