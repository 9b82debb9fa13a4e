"""Batch: tasks submitted together, with callbacks released once when the batch is done.

A batch keeps its progress in counters on its own row (`total`, `completed`, `failed`), which
the transaction that finishes a task of the batch moves with one conditional UPDATE per batch
(`count_finished`): so whether a batch is done is read from one row, never by a scan of its
tasks. Its callbacks are ordinary tasks submitted with the batch and held (`not_before =
AFTER_PARENTS`, as follow-ups are) until `scylla_django.batches.release_callbacks` releases or
cancels each of them, in a conditional write that can succeed once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from django.db import models
from django.db.models import F, Q

from .. import db
from ..db import Now
from ..enums import Status

#: Callback kinds, in the order they are resolved: each is a field of `Batch`.
CALLBACKS = ("on_success", "on_complete", "on_failure")


class BatchQuerySet(models.QuerySet["Batch"]):
    """Selections of batches."""

    def open(self) -> BatchQuerySet:
        """Batches with a callback not yet released or cancelled."""
        return self.filter(closed__isnull=True)

    def due(self) -> BatchQuerySet:
        """Open batches that some callback waits on no longer: every task finished, or one
        failed for good (a cancelled batch counts as finished)."""
        finished = Q(completed__gte=F("total") - F("failed"))
        return self.open().filter(finished | Q(failed__gt=0) | Q(cancelled__isnull=False))


class Batch(models.Model):
    """Tasks submitted together (`scylla_django.batches.Batch`), and its callbacks.

    `total` is the number of tasks submitted in the batch (a retry takes the place of the task
    it follows); `completed` how many of them completed, `failed` how many aborted for good
    (their retries exhausted, or none allowed) or were cancelled. The batch is finished when
    `completed + failed = total`.

    Each callback (`on_success`, `on_complete`, `on_failure`) is a held task: `on_success` runs
    once every task completed, `on_complete` once every task finished, `on_failure` after the
    first failure for good; a callback whose condition can no longer hold is cancelled with
    the code `batch_failed` or `batch_succeeded`. `closed` is set once every callback was
    released or cancelled, `cancelled` when the batch was cancelled.
    """

    id = models.BigAutoField(primary_key=True)
    created = models.DateTimeField(db_default=Now(), editable=False)
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    on_success = models.ForeignKey(
        "Task",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    on_complete = models.ForeignKey(
        "Task",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    on_failure = models.ForeignKey(
        "Task",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    cancelled = models.DateTimeField(null=True, blank=True)
    closed = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[BatchQuerySet] = BatchQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "batches"
        indexes = [
            models.Index(fields=["id"], name="scylla_batch_open_idx", condition=Q(closed=None))
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(completed__lte=F("total")) & Q(failed__lte=F("total")),
                name="scylla_batch_counts",
            )
        ]

    def __str__(self) -> str:
        return f"batch {self.pk}"

    @property
    def done(self) -> int:
        """Tasks of the batch that finished (completed, or failed for good)."""
        return self.completed + self.failed

    @property
    def finished(self) -> bool:
        """Whether every task of the batch finished."""
        return self.done >= self.total

    @property
    def state(self) -> str:
        """One word for the batch: cancelled, running, failed (finished with a failure) or
        completed (every task completed)."""
        if self.cancelled is not None:
            return "cancelled"
        if not self.finished:
            return "running"
        return "completed" if self.completed == self.total else "failed"

    def callbacks(self) -> dict[str, int]:
        """The callback tasks' pks, by kind (the kinds without a callback left out)."""
        found = {kind: getattr(self, f"{kind}_id") for kind in CALLBACKS}
        return {kind: pk for kind, pk in found.items() if pk is not None}

    def results(self, *, after: int | None = None, limit: int = 1000) -> list[tuple[int, str, Any]]:
        """A page of the completed tasks' results, as `(pk, rn, result)` in pk order: the
        first `limit` after the task `after` (a pk of the previous page; None: from the start).
        Read through the batch's index, a page at a time, however big the batch."""
        tasks = self.tasks.filter(status=Status.COMPLETED).order_by("pk")
        if after is not None:
            tasks = tasks.filter(pk__gt=after)
        return list(tasks.values_list("pk", "rn", "result")[: max(1, min(limit, 10_000))])


def count_finished(using: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Move the counters of the batches of `rows` (each `{batch_id, status}` of a task just
    finished for good), in the finishing transaction: see `db.count_finished`."""
    db.count_finished(Batch, using, rows)


def count_requeued(using: str, batch: int | None) -> None:
    """A failed task of `batch` was retried by hand: its retry takes its place, unfinished."""
    if batch is not None:
        Batch.objects.using(using).filter(pk=batch, failed__gt=0).update(failed=F("failed") - 1)
