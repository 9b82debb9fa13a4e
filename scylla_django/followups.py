"""Follow-up tasks: `Task.objects.submit(..., after=[rn1, rn2])` runs once its parents completed.

A follow-up is an ordinary `ready` task held by `not_before = AFTER_PARENTS` (never leasable), with
one `Dependency` row per parent. `release_followups()`, run by the monitor on every pass, finishes
the wait with one conditional write per outcome:

- every parent completed: `not_before` is cleared (one UPDATE for all such tasks, fenced on
  `status = 'ready' AND not_before = AFTER_PARENTS`, so concurrent monitors release each task once);
- a parent aborted or was cancelled (or was purged before the follow-up was released): the
  follow-up is cancelled with the error `parent_failed` naming that parent.

A parent that is retried (`scylla_django.retries`) hands its dependents to its retry in the
abort's transaction, so a follow-up waits for the chain rather than fail on the first attempt.
No status is added to the state machine.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q, Subquery

from . import db, signals
from .db import Now
from .enums import EventType, Status
from .models import AFTER_PARENTS, Dependency, History, Task, count_finished, send_on_commit

ORPHANS_AT_ONCE = 1000
"""Rows of follow-ups no longer held deleted per statement (more are deleted in turn)."""


@dataclass(frozen=True)
class FollowUpPass:
    """What one pass did: follow-ups `released`, and `cancelled` because a parent failed."""

    released: int
    cancelled: int


@dataclass(frozen=True)
class Parent:
    """A task that a follow-up waits for: its id and rn, and its status (None once purged)."""

    id: int
    rn: str
    status: str | None


def waits_for_parents(task: Task) -> bool:
    """Whether `task` is a follow-up still held until its parents have completed."""
    return task.status == Status.READY and task.not_before == AFTER_PARENTS


def parents(task: Task, limit: int | None = None) -> list[Parent]:
    """The tasks that `task` waits for, in the order it named them (at most `limit`).

    Empty once the task was released or cancelled: its dependency rows go then.
    """
    using = task._state.db or "default"
    rows = (
        Dependency.objects.using(using)
        .filter(child_id=task.pk)
        .annotate(
            status=Subquery(
                Task.objects.using(using).filter(pk=OuterRef("parent_id")).values("status")[:1]
            )
        )
        .order_by("pk")
        .values_list("parent_id", "parent_rn", "status")
    )
    return [Parent(pk, rn, status) for pk, rn, status in (rows if limit is None else rows[:limit])]


def parent_results(task: Task) -> dict[str, Any]:
    """The results of the tasks `task` named in `after`, by the rn it named, in one query.

    A parent that was retried is followed to the attempt of its chain that completed (a
    chain's tasks name its first one in `root`); a parent without a completed attempt (or
    purged) maps to None. Empty for a task submitted without `after`.
    """
    named = list(task.after or [])
    if not named:
        return {}
    using = task._state.db or "default"
    rows = (
        Task.objects.using(using)
        .filter(Q(rn__in=named) | Q(root__in=named), status=Status.COMPLETED)
        .values_list("rn", "root", "result")
    )
    found: dict[str, Any] = {}
    for rn, root, result in rows:
        found[rn if rn in named else str(root)] = result
    return {rn: found.get(rn) for rn in named}


def own_not_before(tasks: Iterable[Task]) -> dict[int, datetime | None]:
    """Each task's own `not_before` by id: the date that holds a follow-up is never one.

    A held follow-up's is the delayed start it takes when released (None: none); one query
    for all the held tasks among `tasks`, none if there are none.
    """
    found: dict[int, datetime | None] = {}
    held: list[int] = []
    using = "default"
    for task in tasks:
        if task.not_before == AFTER_PARENTS:
            held.append(task.pk)
            found[task.pk] = None
            using = task._state.db or using
        else:
            found[task.pk] = task.not_before
    if held:
        rows = Dependency.objects.using(using).filter(child_id__in=held)
        found.update(rows.values_list("child_id", "release_at"))
    return found


def release_followups(using: str = "default") -> FollowUpPass:
    """Release follow-ups whose parents all completed; cancel those with a failed parent."""
    tasks = Task.objects.using(using)
    dependencies = Dependency.objects.using(using)
    # Driven by the (small) dependency table, never by a scan of every ready task.
    waiting = tasks.filter(
        pk__in=dependencies.values("child_id"), status=Status.READY, not_before=AFTER_PARENTS
    )
    unfinished = (
        Dependency.objects.using(using)
        .filter(child=OuterRef("pk"))
        .exclude(Exists(tasks.filter(pk=OuterRef("parent_id"), status=Status.COMPLETED)))
    )
    with db.write_atomic(using):
        released_ids = list(
            waiting.filter(~Exists(unfinished))
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)
        )
        released = 0
        if released_ids:
            release_at = Dependency.objects.using(using).filter(child=OuterRef("pk"))
            released = waiting.filter(pk__in=released_ids).update(
                not_before=Subquery(release_at.values("release_at")[:1]), updated=Now()
            )
            Dependency.objects.using(using).filter(child_id__in=released_ids).delete()
    if released and signals.task_submitted.has_listeners(Task):
        for task in tasks.filter(pk__in=released_ids):
            send_on_commit(signals.task_submitted, using, task=task)

    failed = (
        Dependency.objects.using(using)
        .filter(child=OuterRef("pk"))
        .filter(
            Q(
                Exists(
                    tasks.filter(
                        pk=OuterRef("parent_id"), status__in=[Status.ABORTED, Status.CANCELLED]
                    )
                )
            )
            | ~Exists(tasks.filter(pk=OuterRef("parent_id")))
        )
    )
    cancelled = 0
    for child_id in waiting.filter(Exists(failed)).values_list("pk", flat=True)[:1000]:
        cancelled += _cancel_child(child_id, using)
    _delete_orphans(using)
    return FollowUpPass(released=released, cancelled=cancelled)


def _delete_orphans(using: str) -> None:
    """Delete the rows of follow-ups no longer held: cancelled (or purged) by hand while they
    waited.

    The rows are found by a read that locks nothing, then deleted by primary key, their child
    looked at again. A pass that releases a follow-up meanwhile deletes that follow-up's rows in
    its own transaction, and they are not among these: its child is still held in this read's
    snapshot, or its rows are already gone. One DELETE over the whole table with the condition
    would lock every row it reads on MariaDB, theirs too, and two passes deadlocked.
    """
    dependencies = Dependency.objects.using(using)
    held = Exists(
        Task.objects.using(using).filter(
            pk=OuterRef("child_id"), status=Status.READY, not_before=AFTER_PARENTS
        )
    )
    while True:
        orphans = list(dependencies.exclude(held).values_list("pk", flat=True)[:ORPHANS_AT_ONCE])
        if not orphans:
            return
        deleted, _ = dependencies.filter(pk__in=orphans).exclude(held).delete()
        if len(orphans) < ORPHANS_AT_ONCE or not deleted:
            return


def _cancel_child(child_id: int, using: str) -> int:
    """Cancel one held follow-up whose parent failed, naming the parent; 1 if it was cancelled."""
    tasks = Task.objects.using(using)
    with db.write_atomic(using):
        row = (
            Dependency.objects.using(using)
            .filter(child_id=child_id)
            .annotate(status=Subquery(tasks.filter(pk=OuterRef("parent_id")).values("status")[:1]))
            .filter(Q(status__isnull=True) | Q(status__in=[Status.ABORTED, Status.CANCELLED]))
            .order_by("pk")
            .values("parent_rn", "status")
            .first()
        )
        if row is None:
            return 0
        parent, status = row["parent_rn"], row["status"] or "purged"
        error = {
            "code": "parent_failed",
            "args": {"parent": parent, "status": status},
            "description": f"Parent task {parent} was {status}; this follow-up will not run.",
        }
        done = tasks.filter(pk=child_id, status=Status.READY, not_before=AFTER_PARENTS).update(
            status=Status.CANCELLED, errors=[error], updated=Now()
        )
        if not done:
            return 0
        History.objects.using(using).create(task_id=child_id, typ=EventType.CANCELLATION)
        Dependency.objects.using(using).filter(child_id=child_id).delete()
        in_batch = tasks.filter(pk=child_id, batch__isnull=False)
        count_finished(using, in_batch.values("batch_id", "status"))
    task = tasks.filter(pk=child_id).first()
    if task is not None:
        send_on_commit(signals.task_finished, using, task=task, status=task.status)
    return 1
