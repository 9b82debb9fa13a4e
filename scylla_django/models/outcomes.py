"""How a worker ends its leases: `Outcome`, the rows the batched finish writes from them, and
the finished tasks as written (for `task_finished`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet

from ..enums import Status
from ..validation import validate_errors, validate_json

if TYPE_CHECKING:
    from .task import Task


@dataclass(frozen=True)
class Outcome:
    """How a worker ends one lease, for `TaskQuerySet.finish_many`.

    The lease is the task's pk and its `attempts` when leased. Without `errors` the task is
    completed with `result`; with them it is aborted.
    """

    pk: int
    attempts: int
    result: Any = None
    errors: list[dict[str, Any]] | None = None
    # Seconds the handler ran, as the worker measured it; sent with `task_finished`.
    duration: float | None = None
    # The leased task, if the caller holds it: updated in place and sent with `task_finished`
    # instead of being read back.
    task: Task | None = field(default=None, repr=False, compare=False)


def outcome_rows(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """The rows the batched finish writes: `{id, attempts, status, result, errors}`, with the
    target status and the validated result or errors (ValidationError if one is not JSON)."""
    return [
        {
            "id": outcome.pk,
            "attempts": outcome.attempts,
            "status": Status.COMPLETED if outcome.errors is None else Status.ABORTED,
            "result": validate_json(outcome.result, "result", allow_null=True)
            if outcome.errors is None
            else None,
            "errors": None if outcome.errors is None else validate_errors(outcome.errors),
        }
        for outcome in outcomes
    ]


def finished_tasks(
    tasks: QuerySet[Task],
    outcomes: Sequence[Outcome],
    rows: list[dict[str, Any]],
    done: Mapping[int, datetime],
) -> Iterator[tuple[Task, float | None]]:
    """The tasks written from `rows` (`done`: their pks, each with its `updated`), as written,
    each with its handler's run time.

    An outcome that carries its task (as the worker's do) gets that instance updated in place,
    with no query; the others are read back, in one query.
    """
    written = {row["id"]: row for row in rows if row["id"] in done}
    missing = [o.pk for o in outcomes if o.pk in written and o.task is None]
    read = tasks.in_bulk(missing) if missing else {}
    for outcome in outcomes:
        row = written.pop(outcome.pk, None)
        if row is None:
            continue
        task = outcome.task
        if task is None:
            task = read.get(outcome.pk)
            if task is None:  # purged since: nothing left to describe
                continue
        else:
            task.status, task.deadline, task.updated = row["status"], None, done[outcome.pk]
            if row["errors"] is None:
                task.progress, task.result = 1.0, row["result"]
            else:
                task.errors = row["errors"]
        yield task, outcome.duration
