"""Deleting one task that has not started (`Task.delete_ready()`, `DELETE /tasks/{rn}/`): the
row goes at once (its rn free again), and a `TaskDeletion` row keeps what it was, with its
History, for the record.

Only a ready task may be deleted: a running or finished one is a 409 (`task_started`), a
cancelled one too (it is purged with the others after `RETENTION`). A task of a batch or of an
order key is kept (cancel it instead): its batch counts it, and the next task of its order key
waits for it. A follow-up's dependency rows and a held task's hold go with it; a deleted task's
own follow-ups are cancelled by the monitor as those of a purged parent are (`parent_failed`).
"""

from __future__ import annotations

from typing import Any

from django.db import models

from .. import db
from ..db import Now
from ..enums import Status
from ..exceptions import InvalidTransition, TaskNotFound, TaskStarted
from .dependencies import Dependency
from .history import History
from .task_pauses import TaskPause

#: The History type of the entry that a `TaskDeletion` adds to the task's own.
DELETION = "TaskDeletion"


class TaskDeletion(models.Model):
    """The record of a ready task deleted by an operator: its rn, queue, spec and priority,
    when it was created and deleted, by whom, and its History (as `History.as_json()`
    renders each entry, closed by a `TaskDeletion` entry)."""

    id = models.BigAutoField(primary_key=True)
    rn = models.CharField(max_length=128, db_index=True)
    queue = models.CharField(max_length=100)
    spec = models.JSONField()
    priority = models.PositiveSmallIntegerField(default=0)
    created = models.DateTimeField()
    deleted = models.DateTimeField(db_default=Now())
    by = models.CharField(max_length=150, null=True, blank=True)  # noqa: DJ001
    history = models.JSONField(default=list)

    class Meta:
        ordering = ["id"]
        verbose_name = "deleted task"

    def __str__(self) -> str:
        return f"{self.rn} (deleted)"


def delete_ready(task: Any, by: str | None) -> TaskDeletion:
    """Delete the ready `task` (see the module) in one transaction: its row locked, then
    deleted fenced on it still being ready, with its History, its dependency rows and its
    pause; its record written. Raises TaskNotFound, TaskStarted (running or finished),
    InvalidTransition (cancelled, in a batch or with an order key)."""
    using = task._state.db or "default"
    tasks = type(task)._default_manager.using(using)
    with db.write_atomic(using):
        row = (
            tasks.filter(pk=task.pk)
            .select_for_update()
            .values("status", "rn", "queue", "spec", "priority", "created", "batch_id", "order_key")
            .first()
        )
        if row is None:
            raise TaskNotFound(f"No task has rn {task.rn!r}.", rn=task.rn)
        status = row["status"]
        if status in (Status.RUNNING, Status.COMPLETED, Status.ABORTED):
            raise TaskStarted(
                f"Task {task.rn} is {status}: only a task that has not started can be "
                "deleted; cancel it instead.",
                rn=task.rn,
                status=status,
            )
        if status != Status.READY:
            raise InvalidTransition(
                f"Task {task.rn} is {status}: only a ready task can be deleted.",
                rn=task.rn,
                status=status,
            )
        if row["batch_id"] is not None or row["order_key"] is not None:
            part = "a batch" if row["batch_id"] is not None else f"order key {row['order_key']}"
            raise InvalidTransition(
                f"Task {task.rn} is part of {part}, which counts on it: cancel it instead.",
                rn=task.rn,
                status=status,
            )
        history = [
            entry.as_json()
            for entry in History.objects.using(using).filter(task_id=task.pk).order_by("id")
        ]
        deleted, _ = tasks.filter(pk=task.pk, status=Status.READY).delete()
        if deleted != 1:
            raise InvalidTransition(f"Task {task.rn} changed; try again.", rn=task.rn)
        Dependency.objects.using(using).filter(child_id=task.pk).delete()
        TaskPause.objects.using(using).filter(task_id=task.pk).delete()
        now = db.read_clock(using)
        record = TaskDeletion.objects.using(using).create(
            rn=row["rn"],
            queue=row["queue"],
            spec=row["spec"],
            priority=row["priority"],
            created=row["created"],
            deleted=now,
            by=by,
            history=[
                *history,
                {"_typ": DELETION, "worker": None, "by": by, "time": now.isoformat()},
            ],
        )
    return record
