"""History: the events of a task's life, one row per transition."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import models

from ..db import Now
from ..enums import EventType


class History(models.Model):
    """One event in a task's life: TaskAssignment, TaskTimeout, TaskYield, …
    (docs/reference/task.md).

    `time` is the task row's `updated` of the same transition, so time order is causal order.
    """

    id = models.BigAutoField(primary_key=True)
    # DO_NOTHING: tasks are deleted in bulk by TaskQuerySet.delete(), which removes these first.
    # Indexed by `scylla_history_task_idx` (task, id), which serves the foreign key's lookups
    # too: a second index on the task alone would only cost each event's insert.
    task = models.ForeignKey(
        "Task", on_delete=models.DO_NOTHING, related_name="history", db_index=False
    )
    typ = models.CharField(max_length=32, choices=EventType.choices)
    worker = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    progress = models.FloatField(null=True, blank=True)
    time = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "history"
        indexes = [
            models.Index(fields=["task", "id"], name="scylla_history_task_idx"),
            # The dashboard's charts: events of some types in a time range, with their task.
            models.Index(fields=["typ", "time", "task"], name="scylla_history_typ_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.typ} {self.worker or ''}".strip()

    @classmethod
    def of(cls, row: Mapping[str, Any], typ: str, time: datetime) -> History:
        """The `typ` event of a task row read as `{"pk", "owner", "progress"}`, at `time`."""
        return cls(
            task_id=row["pk"], typ=typ, worker=row["owner"], progress=row["progress"], time=time
        )

    def as_json(self) -> dict[str, Any]:
        """The JSON rendering: `{"_typ", "worker", "progress", "time"}`."""
        entry: dict[str, Any] = {"_typ": self.typ, "worker": self.worker}
        if self.typ in (EventType.TIMEOUT, EventType.YIELD) or self.progress is not None:
            entry["progress"] = self.progress
        entry["time"] = self.time.isoformat() if isinstance(self.time, datetime) else None
        return entry


def finished_by(worker: str | None, pks: Sequence[int], using: str) -> set[int]:
    """The tasks among `pks` that `worker` itself completed or aborted (not the monitor)."""
    if worker is None or not pks:
        return set()
    return set(
        History.objects.using(using)
        .filter(
            task_id__in=list(pks),
            worker=worker,
            typ__in=[EventType.COMPLETION, EventType.ABORT],
        )
        .values_list("task_id", flat=True)
    )
