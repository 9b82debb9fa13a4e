"""The monitor's set operation on expired leases: reset them, or abort the tasks that ran out
of attempts."""

from __future__ import annotations

from typing import Any

from django.db import connections, models
from django.db.models import Max

from .. import db, signals
from ..conf import scylla_settings
from ..enums import TRANSITIONS, EventType, Operation, event, sources
from .history import History, _later
from .successors import follow_with_retries


def reset_batch(tasks: models.QuerySet[Any], size: int) -> int:
    """Reset or abort up to `size` expired leases in one transaction; return how many."""
    manager = tasks.model.objects.using(tasks.db)
    with db.write_atomic(tasks.db):
        rows = list(
            manager.expired()
            .select_for_update(skip_locked=True)
            .order_by("deadline")
            .values("pk", "owner", "progress", "attempts", "queue")[:size]
        )
        if not rows:
            return 0
        ids = [row["pk"] for row in rows]
        # Read after the rows are locked (a fresh snapshot), so a yield that committed while
        # we waited is seen and no TaskTimeout is written after it.
        last_ids = (
            History.objects.using(tasks.db)
            .filter(task_id__in=ids)
            .values("task_id")
            .annotate(last=Max("id"))
            .values("last")
        )
        yielded = set(
            History.objects.using(tasks.db)
            .filter(pk__in=last_ids, typ=EventType.YIELD)
            .values_list("task_id", flat=True)
        )
        max_attempts = scylla_settings.MAX_ATTEMPTS
        exhausted = {
            row["pk"]
            for row in rows
            if row["pk"] not in yielded
            and max_attempts is not None
            and row["attempts"] >= max_attempts
        }
        reset, exhaust = TRANSITIONS[Operation.RESET], TRANSITIONS[Operation.EXHAUST]
        now = db.read_clock(tasks.db)
        manager.filter(pk__in=set(ids) - exhausted, status__in=sources(Operation.RESET)).update(
            status=reset.target, owner=None, deadline=None, progress=0.0, updated=now
        )
        if exhausted:
            manager.filter(pk__in=exhausted, status__in=sources(Operation.EXHAUST)).update(
                status=exhaust.target,
                deadline=None,
                errors=[
                    {
                        "code": "max_attempts_exceeded",
                        "args": {"max_attempts": max_attempts},
                        "description": f"The lease expired after {max_attempts} attempts.",
                    }
                ],
                updated=now,
            )
            follow_with_retries(manager, exhausted)
        events = []
        for row in rows:
            if row["pk"] in yielded:
                continue
            events.append(History.of(row, event(Operation.RESET), now))
            if row["pk"] in exhausted:
                aborted = event(Operation.EXHAUST)
                events.append(History(task_id=row["pk"], typ=aborted, time=now))
        History.objects.using(tasks.db).bulk_create(events)
        if db.uses_single_statement_transitions(connections[tasks.db]):
            made_ready = [row["queue"] for row in rows if row["pk"] not in exhausted]
            db.postgresql_notify(tasks.db, db.READY_CHANNEL, made_ready)
    if any(s.has_listeners(tasks.model) for s in (signals.task_reset, signals.task_finished)):
        for task in manager.filter(pk__in=ids):
            signal = signals.task_finished if task.pk in exhausted else signals.task_reset
            _later(signal, tasks.db, task=task, status=task.status)
    return len(rows)
