"""What the outcome writer says of the outcomes it wrote: each counted in the summary by how it
ended its lease, logged (a refusal at INFO, an earlier write of ours that committed at DEBUG),
and their slots freed. A failure to report is logged, never raised: the outcomes are written.
"""

from __future__ import annotations

import logging

from ..exceptions import InvalidTransition, ScyllaError
from ..models import Outcome, Worker
from .outcomes import Outcomes
from .slots import Slots
from .summary import Summary

logger = logging.getLogger("scylla_django")


class WriteReports:
    """Reports the outcomes `worker` wrote in `summary`, and frees their `slots`."""

    def __init__(self, worker: Worker, slots: Slots, summary: Summary) -> None:
        self.worker = worker
        self.slots = slots
        self.summary = summary

    def settle(self, outcomes: Outcomes, errors: dict[int, ScyllaError]) -> None:
        """Report outcomes once written and free their slots."""
        self.report(outcomes, errors)
        self.slots.release([ctx for ctx, _ in outcomes])
        self.slots.hooks.note("written", len(outcomes))

    def report(self, outcomes: Outcomes, errors: dict[int, ScyllaError]) -> None:
        """Count and log `outcomes` once written (`errors`: those refused); a
        failure to log is logged, never raised (the outcomes are written)."""
        try:
            self._count_and_log(outcomes, errors)
        except Exception:
            logger.exception("%s: reporting %d outcome(s) failed", self.worker.name, len(outcomes))

    def _count_and_log(self, outcomes: Outcomes, errors: dict[int, ScyllaError]) -> None:
        name = self.worker.name
        for ctx, outcome in outcomes:
            task = ctx.task
            error = errors.get(outcome.pk)
            if error is None:
                done = ended(outcome)
                self.summary.count(done)
                logger.debug("%s %s %s (queue %s)", name, done, task.rn, task.queue)
            elif type(error) is InvalidTransition:
                self.summary.count(ended(outcome))
                logger.debug("%s: %s", name, error)  # an earlier write of ours committed
            else:
                self.summary.count("not written")
                logger.info("%s could not finish %s: %s", name, task.rn, error)


def ended(outcome: Outcome) -> str:
    """How `outcome` ends its lease, as the summary counts it."""
    if outcome.snooze is not None:
        return "snoozed"
    return "completed" if outcome.errors is None else "aborted"
