"""The counters of a batch that a finish moves, in the finishing transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import models
from django.db.models import F

from ..enums import Status


def count_finished(
    batch: type[models.Model], using: str, rows: Iterable[Mapping[str, Any]]
) -> None:
    """Move the counters of the batches (model `batch`) of `rows` (each `{batch_id, status}` of
    a task just finished for good: completed, or aborted with no retry, or cancelled), in the
    finishing transaction: one UPDATE per batch, in batch order (so concurrent finishes lock
    the batch rows in one order)."""
    tallies: dict[int, list[int]] = {}
    for row in rows:
        pk = row["batch_id"]
        if pk is None:
            continue
        tally = tallies.setdefault(pk, [0, 0])
        tally[0 if row["status"] == Status.COMPLETED else 1] += 1
    batches = batch._default_manager.using(using)
    for pk, (completed, failed) in sorted(tallies.items()):
        batches.filter(pk=pk).update(
            completed=F("completed") + completed, failed=F("failed") + failed
        )
