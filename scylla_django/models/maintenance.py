"""The monitor's set operations: expired leases reset (or their tasks aborted once they ran out
of leases), ready tasks past their `expires_at` cancelled, and terminal tasks past their
retention purged, in batches.

`TaskQuerySet.reset_expired`, `expire` and `purge` are these functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connections, models
from django.db.models import F, Max

from .. import db, signals
from ..conf import scylla_settings
from ..enums import TRANSITIONS, EventType, Operation, event, sources
from ..exceptions import TaskTimedOut, error_record
from .history import History
from .notices import send_on_commit
from .successors import follow_with_retries


def reset_expired(tasks: models.QuerySet[Any], batch_size: int | None = None) -> int:
    """Reset or abort every expired lease among `tasks`, a batch per transaction; return how
    many (see `TaskQuerySet.reset_expired`)."""
    size = batch_size or scylla_settings.RESET_BATCH_SIZE
    total = 0
    while True:
        done = reset_batch(tasks, size)
        total += done
        if done < size:
            return total


def expire(tasks: models.QuerySet[Any], batch_size: int | None = None) -> int:
    """Cancel every ready task of `tasks` past its `expires_at`, a batch per transaction;
    return how many (see `TaskQuerySet.expire`)."""
    size = batch_size or scylla_settings.RESET_BATCH_SIZE
    total = 0
    while True:
        done = expire_batch(tasks, size)
        total += done
        if done < size:
            return total


def expire_batch(tasks: models.QuerySet[Any], size: int) -> int:
    """Cancel up to `size` ready tasks past their `expires_at` in one transaction, each with
    the error `expired` and a TaskCancellation row; return how many.

    The rows are locked first (SKIP LOCKED: a row another monitor or a lease holds is passed
    over), and the write is fenced on the same condition (still ready, still past its
    expiry, on the database clock), so each expiry is written once however many monitors run.
    """
    manager = tasks.model.objects.using(tasks.db)
    transition = TRANSITIONS[Operation.EXPIRE]
    past = manager.filter(
        status__in=sources(Operation.EXPIRE), expires_at__isnull=False, expires_at__lte=db.Now()
    )
    with db.write_atomic(tasks.db):
        ids = list(
            past.select_for_update(skip_locked=True)
            .order_by("expires_at")
            .values_list("pk", flat=True)[:size]
        )
        if not ids:
            return 0
        now = db.read_clock(tasks.db)
        error = {
            "code": "expired",
            "args": {},
            "description": "The task expired before it was started (expires_at).",
        }
        fenced = past.filter(pk__in=ids, expires_at__lte=now)
        cancelled = list(fenced.values_list("pk", flat=True))
        fenced.update(status=transition.target, errors=[error], updated=now)
        History.objects.using(tasks.db).bulk_create(
            History(task_id=pk, typ=event(Operation.EXPIRE), time=now) for pk in cancelled
        )
    if signals.task_finished.has_listeners(tasks.model):
        for task in manager.filter(pk__in=cancelled):
            send_on_commit(signals.task_finished, tasks.db, task=task, status=task.status)
    return len(ids)


def purge(
    candidates: models.QuerySet[Any],
    *,
    batch_size: int | None = None,
    on_batch: Callable[[int], object] | None = None,
) -> int:
    """Delete the `candidates` that are still terminal (and their History), a batch per
    transaction, loading no row; return how many (see `TaskQuerySet.purge`)."""
    size = batch_size or scylla_settings.PURGE_BATCH_SIZE
    terminal = candidates.model.objects.using(candidates.db).terminal()
    total = 0
    while True:
        with db.write_atomic(candidates.db):
            ids = list(candidates.order_by().values_list("pk", flat=True)[:size])
            if not ids:
                return total
            deleted: int = terminal.filter(pk__in=ids).delete()[0]
        total += deleted
        if on_batch is not None:
            on_batch(deleted)
        if len(ids) < size:
            return total


def reset_batch(tasks: models.QuerySet[Any], size: int) -> int:
    """Reset or abort up to `size` expired leases in one transaction; return how many.

    A lease that expired at its run-time limit (`deadline == timeout_at`: the worker's
    heartbeat capped it there) is aborted with `timeout`; one of a task that has had
    `MAX_LEASES` leases with `max_leases_exceeded`; the others are made ready. An abort is
    followed by a retry where the task's policy covers it, as a worker's abort is.
    """
    manager = tasks.model.objects.using(tasks.db)
    with db.write_atomic(tasks.db):
        rows = list(
            manager.expired()
            .select_for_update(skip_locked=True)
            .order_by("deadline")
            .values(
                "pk", "owner", "progress", "leases", "snoozes", "queue", "deadline", "timeout_at"
            )[:size]
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
        # A lease that expired at its run-time limit (the heartbeat capped it there) ran past
        # its timeout: the task is aborted with `timeout`, as its worker would have done.
        timed_out = {
            row["pk"]
            for row in rows
            if row["pk"] not in yielded
            and row["timeout_at"] is not None
            and row["deadline"] == row["timeout_at"]
        }
        max_leases = scylla_settings.MAX_LEASES
        # A lease its own handler ended with a snooze is not one that timed out: not counted.
        exhausted = {
            row["pk"]
            for row in rows
            if row["pk"] not in yielded
            and row["pk"] not in timed_out
            and max_leases is not None
            and row["leases"] - row["snoozes"] >= max_leases
        }
        aborted = exhausted | timed_out
        reset, exhaust = TRANSITIONS[Operation.RESET], TRANSITIONS[Operation.EXHAUST]
        now = db.read_clock(tasks.db)
        manager.filter(pk__in=set(ids) - aborted, status__in=sources(Operation.RESET)).update(
            status=reset.target,
            owner=None,
            deadline=None,
            timeout_at=None,
            progress=0.0,
            updated=now,
        )
        if timed_out:
            # Fenced on the lease still ending at its limit, as read under the row lock.
            manager.filter(
                pk__in=timed_out,
                status__in=sources(Operation.EXHAUST),
                deadline=F("timeout_at"),
            ).update(
                status=exhaust.target,
                deadline=None,
                errors=[
                    error_record(
                        TaskTimedOut.code,
                        "The lease expired at the task's run-time limit (timeout plus "
                        "TIMEOUT_GRACE): its worker did not end the task.",
                    )
                ],
                updated=now,
            )
        if exhausted:
            manager.filter(pk__in=exhausted, status__in=sources(Operation.EXHAUST)).update(
                status=exhaust.target,
                deadline=None,
                errors=[
                    {
                        "code": "max_leases_exceeded",
                        "args": {"max_leases": max_leases},
                        "description": f"The lease expired after {max_leases} leases.",
                    }
                ],
                updated=now,
            )
        follow_with_retries(manager, aborted)
        events = []
        for row in rows:
            if row["pk"] in yielded:
                continue
            events.append(History.of(row, event(Operation.RESET), now))
            if row["pk"] in aborted:
                events.append(History(task_id=row["pk"], typ=event(Operation.EXHAUST), time=now))
        History.objects.using(tasks.db).bulk_create(events)
        if db.uses_single_statement_transitions(connections[tasks.db]):
            made_ready = [row["queue"] for row in rows if row["pk"] not in aborted]
            db.postgresql_notify(tasks.db, db.READY_CHANNEL, made_ready)
    if any(s.has_listeners(tasks.model) for s in (signals.task_reset, signals.task_finished)):
        for task in manager.filter(pk__in=ids):
            signal = signals.task_finished if task.pk in aborted else signals.task_reset
            send_on_commit(signal, tasks.db, task=task, status=task.status)
    return len(rows)
