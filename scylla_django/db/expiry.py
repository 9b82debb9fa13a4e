"""Expired leases: how each is judged (`expiry_kind`, the rule PostgreSQL's reset statement
writes in SQL) and the ORM's reset of them (SQLite, MySQL/MariaDB: `portable_reset`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Case, Count, F, Max, When

from ..enums import TRANSITIONS, EventType, Operation, event, sources
from .clock import read_clock
from .tables import Tables

#: The kinds of expired leases that make their tasks ready again (`expiry_kind`).
READY_KINDS = ("expired", "unstarted", "yielded")


def portable_reset(
    tables: Tables, using: str, rows: Mapping[int, Mapping[str, Any]], max_leases: int | None
) -> tuple[datetime | None, dict[int, str]]:
    """Judge the locked expired `rows`, make the expired, unstarted and yielded ones ready
    (an unstarted one's `unstarted` up by one) with a TaskTimeout row for each expired and
    unstarted one, in a few statements."""
    manager = tables.task._default_manager.using(using)
    history = tables.history._default_manager.using(using)
    # Only a task whose deadline is before its `updated` can have been given back (see
    # NOT_YIELDED); History is read for those alone, after the rows were locked (a fresh
    # snapshot), so a yield that committed while we waited is seen.
    given_back = [pk for pk, row in rows.items() if row["deadline"] < row["updated"]]
    last_ids = (
        history.filter(task_id__in=given_back)
        .values("task_id")
        .annotate(last=Max("id"))
        .values("last")
    )
    yielded = (
        set(history.filter(pk__in=last_ids, typ=EventType.YIELD).values_list("task_id", flat=True))
        if given_back
        else set()
    )
    yields: dict[int, int] = (
        dict(
            history.filter(task_id__in=list(rows), typ=EventType.YIELD)
            .values("task_id")
            .annotate(n=Count("id"))
            .values_list("task_id", "n")
        )
        if max_leases is not None
        else {}
    )
    kinds = {
        pk: expiry_kind(row, pk in yielded, max_leases, yields.get(pk, 0))
        for pk, row in rows.items()
    }
    now = read_clock(using)
    ready = [pk for pk, kind in kinds.items() if kind in READY_KINDS]
    fenced = manager.filter(pk__in=ready, status__in=sources(Operation.RESET), deadline__lt=now)
    changed = set(fenced.values_list("pk", flat=True))
    unstarted = [pk for pk in ready if kinds[pk] == "unstarted"]
    fenced.update(
        status=TRANSITIONS[Operation.RESET].target,
        owner=None,
        deadline=None,
        timeout_at=None,
        progress=0.0,
        updated=now,
        unstarted=Case(
            When(pk__in=unstarted, then=F("unstarted") + 1),
            default=F("unstarted"),
            output_field=models.PositiveIntegerField(),
        ),
    )
    history.bulk_create(
        tables.history(
            task_id=pk,
            typ=event(Operation.RESET),
            worker=rows[pk]["owner"],
            progress=rows[pk]["progress"],
            time=now,
        )
        for pk in sorted(changed)
        if kinds[pk] in ("expired", "unstarted")
    )
    kinds = {pk: kind for pk, kind in kinds.items() if pk in changed or pk not in ready}
    return now, kinds


def expiry_kind(row: Mapping[str, Any], yielded: bool, max_leases: int | None, yields: int) -> str:
    """How an expired lease is dealt with, as PostgreSQL's reset judges it: `timed_out`
    (it expired at its run-time limit, the cap its lease was given, given back or not: aborted
    with `timeout`, as its worker would have done), `yielded` (given back: made ready without
    a TaskTimeout), `unstarted` (a reservation: its handler was not known to have started, so
    its worker's crash was not the task's doing; made ready with a TaskTimeout, `unstarted` up
    by one, never counted), `exhausted` (the task has had `max_leases` leases; a lease its own
    handler ended with a snooze is not counted, nor one of the task's `yields` earlier leases
    given back, nor its unstarted leases but the first), or `expired` (made ready with a
    TaskTimeout).

    The first unstarted lease of a task counts once the task's handler is known to have run
    when its lease expired: that first one may have been a run of its own that killed its
    worker before the heartbeat could report its start. Every later lease of the task records
    its start before its handler runs (the worker sees `unstarted > 0`), so its later
    unstarted leases are ones its handler surely never began. A poison pill that kills its
    worker at once is thus aborted after `max_leases` runs of its own; a task stranded beside
    it, whose handler never started, is never counted."""
    if row["timeout_at"] is not None and row["deadline"] == row["timeout_at"]:
        return "timed_out"
    if yielded:
        return "yielded"
    if not row["handler_started"]:
        return "unstarted"
    forgiven = max(row["unstarted"] - 1, 0)
    if max_leases is not None and row["leases"] - row["snoozes"] - forgiven - yields >= max_leases:
        return "exhausted"
    return "expired"
