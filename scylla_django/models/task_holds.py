"""An operator's hold on one ready task: `Task.hold()` keeps it from every lease until
`Task.release_hold()`, without cancelling it and without a new status.

A held task is an ordinary `ready` task whose `not_before` is `ON_HOLD`, a moment that never
comes: every lease (the PostgreSQL statement, the portable path, a lease by rn) leases only
tasks whose `not_before` has passed, so the hold is a row condition of the lease itself and
the lease statement needs no word of it. The task's own `not_before` waits in its `TaskHold`
row, beside the task (the lease never reads it), with who held it and when, and is put back
by the release. A follow-up waiting for its parents (`not_before = HELD`) cannot be held.

Whether a task is held is derived (`not_before == ON_HOLD`) and shown among the reasons it
waits (`held`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import models

from .. import db
from ..db import Now
from ..enums import Status
from ..exceptions import InvalidTransition, NotHeld, TaskHeld, TaskNotFound
from .dependencies import HELD

#: The `not_before` of a task on an operator's hold: never leasable (a day before `HELD`, the
#: follow-ups', so that the two are told apart).
ON_HOLD = datetime(9999, 12, 30, tzinfo=UTC)


class TaskHold(models.Model):
    """An operator's hold on a ready task: the task's own `not_before`, put back on release,
    who held it (a user name, or None) and when. One row per held task; deleted on release,
    or with the task."""

    id = models.BigAutoField(primary_key=True)
    # Not a database constraint: purging tasks never cascades here (`TaskQuerySet.delete`
    # deletes these rows with their tasks).
    task = models.OneToOneField(
        "Task", on_delete=models.DO_NOTHING, db_constraint=False, related_name="task_hold"
    )
    not_before = models.DateTimeField(null=True, blank=True)
    by = models.CharField(max_length=150, null=True, blank=True)  # noqa: DJ001
    since = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name = "task hold"

    def __str__(self) -> str:
        return f"hold on task {self.task_id}"


def is_held(task: Any) -> bool:
    """Whether `task` is on an operator's hold."""
    return bool(task.status == Status.READY and task.not_before == ON_HOLD)


def hold(task: Any, by: str | None) -> None:
    """Put the ready `task` on hold (see the module): one transaction that locks its row,
    moves its `not_before` to `ON_HOLD`, fenced on it being ready and not held, and keeps its
    own in a `TaskHold` row. Raises TaskNotFound, TaskHeld (held already),
    InvalidTransition (not ready, or a follow-up waiting for its parents)."""
    using = task._state.db or "default"
    tasks = type(task)._default_manager.using(using)
    with db.write_atomic(using):
        row = tasks.filter(pk=task.pk).select_for_update().values("status", "not_before").first()
        if row is None:
            raise TaskNotFound(f"No task has rn {task.rn!r}.", rn=task.rn)
        if row["status"] != Status.READY:
            raise InvalidTransition(
                f"Task {task.rn} is {row['status']}: only a ready task can be held.",
                rn=task.rn,
                status=row["status"],
            )
        if row["not_before"] == ON_HOLD:
            raise TaskHeld(f"Task {task.rn} is held already.", rn=task.rn, status=row["status"])
        if row["not_before"] == HELD:
            raise InvalidTransition(
                f"Task {task.rn} waits for its parents to complete: it cannot be held.",
                rn=task.rn,
                status=row["status"],
            )
        fenced = tasks.filter(pk=task.pk, status=Status.READY, not_before=row["not_before"])
        if fenced.update(not_before=ON_HOLD, updated=Now()) != 1:
            raise InvalidTransition(f"Task {task.rn} changed; try again.", rn=task.rn)
        TaskHold.objects.using(using).create(task_id=task.pk, not_before=row["not_before"], by=by)
    task.refresh_from_db(using=using, fields=["status", "not_before", "updated"])


def release(task: Any) -> None:
    """End the hold on `task`: its own `not_before` back, in one transaction that deletes the
    `TaskHold` row, fenced on the task being ready and held; workers of its queue are told
    (PostgreSQL). Raises TaskNotFound, NotHeld. A held task cancelled meanwhile only loses
    its hold row (NotHeld is raised: it stays cancelled)."""
    using = task._state.db or "default"
    tasks = type(task)._default_manager.using(using)
    with db.write_atomic(using):
        kept = TaskHold.objects.using(using).select_for_update().filter(task_id=task.pk).first()
        if kept is None:
            if not tasks.filter(pk=task.pk).exists():
                raise TaskNotFound(f"No task has rn {task.rn!r}.", rn=task.rn)
            raise NotHeld(f"Task {task.rn} is not held.", rn=task.rn, status=task.status)
        released = tasks.filter(pk=task.pk, status=Status.READY, not_before=ON_HOLD).update(
            not_before=kept.not_before, updated=Now()
        )
        kept.delete()  # committed either way: a hold outlives no release
        status = tasks.filter(pk=task.pk).values_list("status", flat=True).first()
        if released:
            db.notify_ready(using, [task.queue])
    if not released:
        raise NotHeld(
            f"Task {task.rn} is {status}, not held: its hold is dropped.", rn=task.rn, status=status
        )
    task.refresh_from_db(using=using, fields=["status", "not_before", "updated"])


def holding(task: Any) -> TaskHold | None:
    """The hold on `task`, if any."""
    using = task._state.db or "default"
    return TaskHold.objects.using(using).filter(task_id=task.pk).first()


def own_not_before(tasks: Iterable[Any]) -> dict[int, datetime | None]:
    """The own `not_before` of each held task among `tasks`, by id (the one its release gives
    back; None: none): one query for them all, none if none is held."""
    held = [task for task in tasks if task.not_before == ON_HOLD]
    if not held:
        return {}
    using = held[0]._state.db or "default"
    found: dict[int, datetime | None] = dict.fromkeys((task.pk for task in held), None)
    rows = TaskHold.objects.using(using).filter(task_id__in=list(found))
    found.update(rows.values_list("task_id", "not_before"))
    return found
