"""An operator's pause of one ready task: `Task.pause()` keeps it from every lease until
`Task.resume()`, without cancelling it and without a new status (a queue's pause does the same
for a whole queue, `QueueSetting.objects.pause`).

A paused task is an ordinary `ready` task whose `not_before` is `PAUSED`, a moment that never
comes: every lease (the PostgreSQL statement, the portable path, a lease by rn) leases only
tasks whose `not_before` has passed, so the pause is a row condition of the lease itself and
the lease statement needs no word of it. The task's own `not_before` waits in its `TaskPause`
row, beside the task (the lease never reads it), with who paused it and when, and is put back
when it resumes. A follow-up waiting for its parents (`not_before = AFTER_PARENTS`) cannot be
paused.

Whether a task is paused is derived (`not_before == PAUSED`) and shown among the reasons it
waits (`paused`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import models

from .. import db
from ..db import Now
from ..enums import Status
from ..exceptions import InvalidTransition, NotPaused, TaskNotFound, TaskPaused
from .dependencies import AFTER_PARENTS

#: The `not_before` of a task an operator paused: never leasable (a day before
#: `AFTER_PARENTS`, the follow-ups', so that the two are told apart).
PAUSED = datetime(9999, 12, 30, tzinfo=UTC)


class TaskPause(models.Model):
    """An operator's pause of a ready task: the task's own `not_before`, put back when it
    resumes, who paused it (a user name, or None) and when. One row per paused task; deleted
    when it resumes, or with the task."""

    id = models.BigAutoField(primary_key=True)
    # Not a database constraint: purging tasks never cascades here (`TaskQuerySet.delete`
    # deletes these rows with their tasks).
    task = models.OneToOneField(
        "Task", on_delete=models.DO_NOTHING, db_constraint=False, related_name="task_pause"
    )
    not_before = models.DateTimeField(null=True, blank=True)
    by = models.CharField(max_length=150, null=True, blank=True)  # noqa: DJ001
    since = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name = "task pause"

    def __str__(self) -> str:
        return f"pause of task {self.task_id}"


def is_paused(task: Any) -> bool:
    """Whether an operator paused `task`."""
    return bool(task.status == Status.READY and task.not_before == PAUSED)


def pause(task: Any, by: str | None) -> None:
    """Pause the ready `task` (see the module): one transaction that locks its row, moves its
    `not_before` to `PAUSED`, fenced on it being ready and not paused, and keeps its own in a
    `TaskPause` row. Raises TaskNotFound, TaskPaused (paused already),
    InvalidTransition (not ready, or a follow-up waiting for its parents)."""
    using = task._state.db or "default"
    tasks = type(task)._default_manager.using(using)
    with db.write_atomic(using):
        row = tasks.filter(pk=task.pk).select_for_update().values("status", "not_before").first()
        if row is None:
            raise TaskNotFound(f"No task has rn {task.rn!r}.", rn=task.rn)
        if row["status"] != Status.READY:
            raise InvalidTransition(
                f"Task {task.rn} is {row['status']}: only a ready task can be paused.",
                rn=task.rn,
                status=row["status"],
            )
        if row["not_before"] == PAUSED:
            raise TaskPaused(f"Task {task.rn} is paused already.", rn=task.rn, status=row["status"])
        if row["not_before"] == AFTER_PARENTS:
            raise InvalidTransition(
                f"Task {task.rn} waits for its parents to complete: it cannot be paused.",
                rn=task.rn,
                status=row["status"],
            )
        fenced = tasks.filter(pk=task.pk, status=Status.READY, not_before=row["not_before"])
        if fenced.update(not_before=PAUSED, updated=Now()) != 1:
            raise InvalidTransition(f"Task {task.rn} changed; try again.", rn=task.rn)
        TaskPause.objects.using(using).create(task_id=task.pk, not_before=row["not_before"], by=by)
    task.refresh_from_db(using=using, fields=["status", "not_before", "updated"])


def resume(task: Any) -> None:
    """End the pause of `task`: its own `not_before` back, in one transaction that deletes the
    `TaskPause` row, fenced on the task being ready and paused; workers of its queue are told
    (PostgreSQL). Raises TaskNotFound, NotPaused. A paused task cancelled meanwhile only loses
    its pause row (NotPaused is raised: it stays cancelled)."""
    using = task._state.db or "default"
    tasks = type(task)._default_manager.using(using)
    with db.write_atomic(using):
        kept = TaskPause.objects.using(using).select_for_update().filter(task_id=task.pk).first()
        if kept is None:
            if not tasks.filter(pk=task.pk).exists():
                raise TaskNotFound(f"No task has rn {task.rn!r}.", rn=task.rn)
            raise NotPaused(f"Task {task.rn} is not paused.", rn=task.rn, status=task.status)
        resumed = tasks.filter(pk=task.pk, status=Status.READY, not_before=PAUSED).update(
            not_before=kept.not_before, updated=Now()
        )
        kept.delete()  # committed either way: a pause outlives no resume
        status = tasks.filter(pk=task.pk).values_list("status", flat=True).first()
        if resumed:
            db.notify_ready(using, [task.queue])
    if not resumed:
        raise NotPaused(
            f"Task {task.rn} is {status}, not paused: its pause is dropped.",
            rn=task.rn,
            status=status,
        )
    task.refresh_from_db(using=using, fields=["status", "not_before", "updated"])


def pause_of(task: Any) -> TaskPause | None:
    """The pause of `task`, if any."""
    using = task._state.db or "default"
    return TaskPause.objects.using(using).filter(task_id=task.pk).first()


def own_not_before(tasks: Iterable[Any]) -> dict[int, datetime | None]:
    """The own `not_before` of each paused task among `tasks`, by id (the one resuming gives
    back; None: none): one query for them all, none if none is paused."""
    paused = [task for task in tasks if task.not_before == PAUSED]
    if not paused:
        return {}
    using = paused[0]._state.db or "default"
    found: dict[int, datetime | None] = dict.fromkeys((task.pk for task in paused), None)
    rows = TaskPause.objects.using(using).filter(task_id__in=list(found))
    found.update(rows.values_list("task_id", "not_before"))
    return found
