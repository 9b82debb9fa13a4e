"""The write that refills: outcomes written with the lease of up to as many tasks as the slots
they free (`finish_and_lease`, one statement on PostgreSQL), each freed slot passed straight to
the lease so that no other lease takes it, and the leased tasks handed out to be run. The
database never sees the worker hold more than `concurrency` running tasks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import Error as DatabaseError

from ..exceptions import ScyllaError
from ..handlers import TaskContext
from ..models import Worker
from .execution import Execution
from .fenced_writes import FencedWrites
from .heartbeat import Heartbeat
from .outcomes import Outcomes
from .slots import Claim, Slots
from .write_reports import WriteReports
from .write_retry import WriteRetry


class Refills:
    """Writes `worker`'s outcomes with the lease that refills their slots, handing the tasks
    leased to `execution`. `stopping` is set when the worker stops leasing (a task leased
    meanwhile is given back through `heartbeat`); `wake` asks the lease loop to lease."""

    def __init__(
        self,
        worker: Worker,
        writes: FencedWrites,
        retry: WriteRetry,
        reports: WriteReports,
        *,
        slots: Slots,
        execution: Execution,
        heartbeat: Heartbeat,
        stopping: threading.Event,
        wake: Callable[[], None],
    ) -> None:
        self.worker = worker
        self.writes = writes
        self.retry = retry
        self.reports = reports
        self.slots = slots
        self.execution = execution
        self.heartbeat = heartbeat
        self.stopping = stopping
        self.wake = wake

    def write_and_dispatch(self, outcomes: Outcomes) -> bool:
        """Write `outcomes` and lease into the slots they free, handing the leased tasks out;
        False if nothing was (no free slot, a database error): the outcomes are in hand, to
        write alone."""
        claim = self.slots.claim([ctx for ctx, _ in outcomes], lease=not self.stopping.is_set())
        started = self.write(outcomes, claim) if claim.size else None
        if started is None:
            return False
        for ctx in started:
            self.execution.dispatch(ctx)
        return True

    def write(self, outcomes: Outcomes, claim: Claim) -> list[TaskContext] | None:
        """Write the outcomes and lease into `claim`'s slots, in one statement on
        PostgreSQL; return the leased tasks' contexts, in hand, for the caller to run or hand
        out. None if nothing was written: the claim is undone, the outcomes in hand."""
        try:
            errors, tasks = self.writes.finish_and_lease(outcomes, claim.size)
        except (DatabaseError, ScyllaError) as exc:
            self.retry.not_written(exc, outcomes)
            self.slots.unclaim(claim)
            return None
        except Exception:
            self.retry.failed_after_sending(outcomes)
            self.slots.drop(claim)
            return []
        self.reports.report(outcomes, errors)
        # The finished task's slot passed to the lease (`take()` counts the leased ones).
        self.slots.hooks.note("written", len(outcomes))
        started = self.slots.take(claim, tasks, self.worker)
        if len(started) < claim.size or self.stopping.is_set():
            self.wake()  # a task that became ready meanwhile is the lease loop's
        if started and self.stopping.is_set():
            # The stop came while leasing: give these back rather than start them.
            self.heartbeat.give_back(started)
            self.slots.release(started)
            return []
        return started
