"""The monitor's set operations: expired leases reset (or their tasks aborted once they ran out
of leases), ready tasks past their `expires_at` cancelled, and terminal tasks past their
retention purged, in chunks.

`TaskQuerySet.reset_expired`, `expire` and `purge` are these functions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import F

from .. import db, signals
from ..conf import scylla_settings
from ..enums import TRANSITIONS, Operation, event, sources
from ..exceptions import TaskTimedOut, error_record
from ..retries import MAX_LEASES_CODE
from .history import History
from .notices import send_on_commit
from .successors import follow_with_retries
from .tables import tables


def reset_expired(tasks: models.QuerySet[Any], chunk_size: int | None = None) -> int:
    """Reset or abort every expired lease among `tasks`, a chunk per transaction; return how
    many (see `TaskQuerySet.reset_expired`)."""
    size = chunk_size or scylla_settings.RESET_CHUNK_SIZE
    total = 0
    while True:
        done = reset_chunk(tasks, size)
        total += done
        if done < size:
            return total


def expire(tasks: models.QuerySet[Any], chunk_size: int | None = None) -> int:
    """Cancel every ready task of `tasks` past its `expires_at`, a chunk per transaction;
    return how many (see `TaskQuerySet.expire`)."""
    size = chunk_size or scylla_settings.RESET_CHUNK_SIZE
    total = 0
    while True:
        done = expire_chunk(tasks, size)
        total += done
        if done < size:
            return total


def expire_chunk(tasks: models.QuerySet[Any], size: int) -> int:
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
    chunk_size: int | None = None,
    on_chunk: Callable[[int], object] | None = None,
) -> int:
    """Delete the `candidates` that are still terminal (and their History), a chunk per
    transaction, loading no row; return how many (see `TaskQuerySet.purge`)."""
    size = chunk_size or scylla_settings.PURGE_CHUNK_SIZE
    terminal = candidates.model.objects.using(candidates.db).terminal()
    total = 0
    while True:
        with db.write_atomic(candidates.db):
            ids = list(candidates.order_by().values_list("pk", flat=True)[:size])
            if not ids:
                return total
            deleted: int = terminal.filter(pk__in=ids).delete()[0]
        total += deleted
        if on_chunk is not None:
            on_chunk(deleted)
        if len(ids) < size:
            return total


def reset_chunk(tasks: models.QuerySet[Any], size: int) -> int:
    """Reset or abort up to `size` expired leases in one transaction; return how many.

    A lease that expired at its run-time limit (`deadline == timeout_at`: the lease, or a
    heartbeat, was capped there) is aborted with `timeout`; one of a task that has had
    `MAX_LEASES` leases with `max_leases_exceeded`; the others are made ready. A lease whose
    handler was not known to have started (a reservation: its worker crashed before it ran
    the task) is never counted, and makes the task ready with `unstarted` up by one (see
    `db.expiry.expiry_kind`). An abort is followed by a retry where the task's policy
    covers it, as a worker's abort is.

    The expired rows are locked first (SKIP LOCKED: a row another monitor or a writer holds
    is passed over), then judged and written by the database's driver (`Driver.reset`: on
    PostgreSQL the resets, their History rows and the ready notifications are one statement;
    elsewhere a few statements per chunk; `db.expiry.expiry_kind` says how each lease is
    judged). The aborts, rare, are written the same way everywhere.
    """
    manager = tasks.model.objects.using(tasks.db)
    with db.write_atomic(tasks.db):
        rows = {
            row["pk"]: row
            for row in manager.expired()
            .select_for_update(skip_locked=True)
            .order_by("deadline")
            .values(
                "pk",
                "owner",
                "progress",
                "leases",
                "snoozes",
                "handler_started",
                "unstarted",
                "queue",
                "deadline",
                "timeout_at",
                "updated",
            )[:size]
        }
        if not rows:
            return 0
        max_leases = scylla_settings.MAX_LEASES
        clock, kinds = db.driver(tasks.db).reset(tables(tasks.model), rows, max_leases)
        timed_out = {pk for pk, kind in kinds.items() if kind == "timed_out"}
        exhausted = {pk for pk, kind in kinds.items() if kind == "exhausted"}
        if clock is not None:
            abort_expired(manager, rows, timed_out, exhausted, clock, max_leases)
    aborted = timed_out | exhausted
    if any(s.has_listeners(tasks.model) for s in (signals.task_reset, signals.task_finished)):
        for task in manager.filter(pk__in=list(kinds)):
            signal = signals.task_finished if task.pk in aborted else signals.task_reset
            send_on_commit(signal, tasks.db, task=task, status=task.status)
    return len(rows)


def abort_expired(
    manager: models.QuerySet[Any],
    rows: dict[int, dict[str, Any]],
    timed_out: set[int],
    exhausted: set[int],
    now: datetime,
    max_leases: int | None,
) -> None:
    """Abort the locked expired leases `timed_out` (with `timeout`) and `exhausted` (with
    `max_leases_exceeded`), each with its TaskTimeout and abort History rows stamped `now`,
    then follow them by their retries; in the resetting transaction."""
    if not timed_out and not exhausted:
        return
    exhaust = TRANSITIONS[Operation.EXHAUST]
    expired = manager.filter(status__in=sources(Operation.EXHAUST), deadline__lt=now)
    if timed_out:
        # Fenced on the lease still ending at its limit, as read under the row lock.
        expired.filter(pk__in=timed_out, deadline=F("timeout_at")).update(
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
        expired.filter(pk__in=exhausted).update(
            status=exhaust.target,
            deadline=None,
            errors=[
                {
                    "code": MAX_LEASES_CODE,
                    "args": {"max_leases": max_leases},
                    "description": f"The lease expired after {max_leases} leases.",
                }
            ],
            updated=now,
        )
    aborted = timed_out | exhausted
    follow_with_retries(manager, aborted)
    events = []
    for pk in sorted(aborted):
        events.append(History.of(rows[pk], event(Operation.RESET), now))
        events.append(History(task_id=pk, typ=event(Operation.EXHAUST), time=now))
    History.objects.using(manager.db).bulk_create(events)
