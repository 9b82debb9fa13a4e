"""A failed write of outcomes: a database error drops the worker's connection and the write is
retried, after a backoff, until the database answers or the grace period of a shutdown ends (an
outcome given up then is left to its lease's expiry: the task runs again). An error that is not
the database's, raised once the outcomes are sent (a `task_finished` receiver, a log handler),
is logged with its traceback and frees the slots: it is never the tasks'.
"""

from __future__ import annotations

import logging
import threading

from django.db import Error as DatabaseError

from .. import db
from ..models import Worker
from .database import WorkerConnection
from .fenced_writes import FencedWrites
from .outcomes import Outcomes
from .slots import Slots
from .summary import Summary
from .write_reports import WriteReports

logger = logging.getLogger("scylla_django")


class WriteRetry:
    """Writes outcomes with `writes`, retrying through database errors until `grace_over` is
    set; reports them with `reports`."""

    def __init__(
        self,
        worker: Worker,
        writes: FencedWrites,
        reports: WriteReports,
        *,
        slots: Slots,
        summary: Summary,
        connection: WorkerConnection,
        grace_over: threading.Event,
    ) -> None:
        self.worker = worker
        self.writes = writes
        self.reports = reports
        self.slots = slots
        self.summary = summary
        self.connection = connection
        self.grace_over = grace_over

    def write(self, outcomes: Outcomes) -> None:
        """Write `outcomes` together, retrying through database errors until the grace period
        ends, then report them and free their slots."""
        failures = db.DatabaseRetry(self.writes.options.using)
        while True:
            try:
                errors = self.writes.finish(outcomes)
                break
            except DatabaseError as exc:
                self.connection.discard()
                wait = failures.failed()
                if self.grace_over.is_set():
                    for ctx, _ in outcomes:
                        logger.error(
                            "%s gave up the outcome of %s after %d failed writes (%s); the "
                            "task will run again once its lease expires",
                            self.worker.name,
                            ctx.task.rn,
                            failures.failures,
                            exc,
                        )
                    self.summary.count("not written", len(outcomes))
                    self.slots.release([ctx for ctx, _ in outcomes])
                    return
                logger.warning(
                    "%s could not write %d outcome(s) (%s); retrying in %gs",
                    self.worker.name,
                    len(outcomes),
                    exc,
                    wait,
                )
                self.grace_over.wait(wait)
            except Exception:
                self.failed_after_sending(outcomes)
                self.slots.release([ctx for ctx, _ in outcomes])
                return
        self.reports.settle(outcomes, errors)

    def not_written(self, exc: Exception, outcomes: Outcomes) -> None:
        """Log a write of `outcomes` that failed (retried later), dropping a lost connection."""
        logger.warning(
            "%s could not write %d outcome(s) (%s); retrying", self.worker.name, len(outcomes), exc
        )
        if isinstance(exc, DatabaseError):
            self.connection.discard()

    def failed_after_sending(self, outcomes: Outcomes) -> None:
        """Log an error other than the database's raised by a write of `outcomes`: most often a
        receiver of `task_finished`, run once the outcomes are committed. Never the tasks'
        errors: their slots are freed (an outcome that was not written leaves its task to its
        lease's expiry)."""
        logger.exception(
            "%s: writing the outcome(s) of %s raised an error that is not the database's "
            "(a task_finished receiver?); their slots are freed",
            self.worker.name,
            ", ".join(ctx.task.rn for ctx, _ in outcomes),
        )
