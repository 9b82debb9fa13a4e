"""How a worker ends its leases: `Outcome`, and the rows the batched finish writes from
them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import models

from ..enums import Status
from ..validation import validate_errors, validate_json


@dataclass(frozen=True)
class Outcome:
    """How a worker ends one lease, for `TaskQuerySet.finish_many`.

    The lease is the task's pk and its lease number (its `leases` when leased). Without
    `errors` the task is completed with `result`; with them it is aborted. With `snooze` (a
    delay) it is snoozed instead (`Task.snooze`). `children` are the submissions
    (`submit()`'s keyword arguments) made in the transaction that completes the task, and
    never if it does not complete.
    """

    pk: int
    lease: int
    result: Any = None
    errors: list[dict[str, Any]] | None = None
    snooze: timedelta | None = None
    children: tuple[dict[str, Any], ...] = ()
    # Seconds the handler ran, as the worker measured it; sent with `task_finished`.
    duration: float | None = None
    # What the handler's run used, as the worker measured it (see `Task.cpu_time`,
    # `Task.peak_memory`): written with the outcome, None when not measured.
    cpu_time: float | None = None
    peak_memory: int | None = None
    # The name of the run's stored log (`scylla_django.logs`), named on the row by the
    # outcome's own write; None leaves the row's as it was.
    log: str | None = None
    # The leased Task, if the caller holds it: updated in place and sent with `task_finished`
    # instead of being read back.
    task: models.Model | None = field(default=None, repr=False, compare=False)


def outcome_rows(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """The rows the batched finish writes: `{id, lease, status, result, errors,
    cpu_time, peak_memory, log}`, with the
    target status and the validated result or errors (ValidationError if one is not JSON)."""
    return [
        {
            "id": outcome.pk,
            "lease": outcome.lease,
            "status": Status.COMPLETED if outcome.errors is None else Status.ABORTED,
            "result": validate_json(outcome.result, "result", allow_null=True)
            if outcome.errors is None
            else None,
            "errors": None if outcome.errors is None else validate_errors(outcome.errors),
            "cpu_time": outcome.cpu_time,
            "peak_memory": outcome.peak_memory,
            "log": outcome.log,
        }
        for outcome in outcomes
    ]
