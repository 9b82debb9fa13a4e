"""The transitions that PostgreSQL makes in one statement (`db.postgresql`), for the other
databases (SQLite, MySQL/MariaDB): a transaction that locks, writes the task rows, then their
History rows. `TaskQuerySet.lease` and `finish_many` choose between the two."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, models
from django.db.models import ExpressionWrapper, F, Q

from .. import db
from ..enums import TRANSITIONS, EventType, Operation, Status, event, sources
from .batches import count_finished
from .history import History
from .processes import Worker
from .queues import QueueSetting, due, unexpired


def lease(
    tasks: models.QuerySet[Any],
    pk: int,
    name: str,
    queues: list[str],
    limit: int,
    lease_length: timedelta,
    timeouts: Mapping[str, timedelta],
    timeout_grace: timedelta,
    reservation: timedelta | None = None,
) -> list[Any] | None:
    """Lease up to `limit` tasks of `queues` for the worker `name` (pk `pk`); None if it may
    not lease. As `db.postgresql_lease`, with the limited queues' settings locked first: a
    task with a run-time limit (its own `timeout`, else its queue's in `timeouts`) gets
    `timeout_at = now + limit + timeout_grace`, and a deadline no later; with a
    `reservation`, the deadline is now plus `reservation` and `handler_started` false until
    a heartbeat reports the handler's start."""
    transition = TRANSITIONS[Operation.LEASE]
    order = ("-priority", "turn", "created", "id")
    tasks = tasks.model.objects.using(tasks.db)
    with db.write_atomic(tasks.db):
        # Lock the limited queues' settings first (in a fixed order), so that the running
        # tasks counted below cannot change until this lease commits.
        settings = list(
            QueueSetting.objects.using(tasks.db)
            .filter(queue__in=queues)
            .select_for_update()
            .order_by("queue")
            .values_list("queue", "paused", "max_running")
        )
        if not Worker.objects.using(tasks.db).filter(pk=pk, stopped__isnull=True).exists():
            return None
        paused = {queue for queue, is_paused, _ in settings if is_paused}
        limits = {q: n for q, is_paused, n in settings if n is not None and not is_paused}
        free = [q for q in queues if q not in paused and q not in limits]
        budgets = dict.fromkeys(free, limit)
        if limits:
            running = dict(
                tasks.filter(status=Status.RUNNING, queue__in=list(limits))
                .order_by()
                .values_list("queue")
                .annotate(n=models.Count("*"))
                .values_list("queue", "n")
            )
            for queue, most in limits.items():
                budgets[queue] = max(0, min(limit, most - running.get(queue, 0)))
        walks = [(free, limit)] if free else []
        walks += [([q], budgets[q]) for q in limits if budgets[q]]
        keyed = ExpressionWrapper(Q(keys__isnull=False), output_field=models.BooleanField())
        found: list[tuple[int, int, datetime, int, bool, str, timedelta | None, float]] = []
        for walk, size in walks:
            found += (
                tasks.filter(status=Status.READY, queue__in=walk)
                .filter(due(), unexpired())
                # A task whose keys look busy is passed over (the take trigger decides).
                .filter(db.keys.free_in_walk(connections[tasks.db]))
                .select_for_update(skip_locked=True)
                .order_by(*order)
                .annotate(keyed=keyed)
                .values_list(
                    "priority", "pk", "created", "pk", "keyed", "queue", "timeout", "turn"
                )[:size]
            )
        found.sort(key=lambda row: (-row[0], row[7], row[2], row[3]))
        plain = [row[1] for row in found[:limit] if not row[4]]
        with_keys = [row[1] for row in found[:limit] if row[4]]
        ids = plain + with_keys
        if not ids:
            return []
        base = tasks.filter(status__in=sources(Operation.LEASE))
        now = db.read_clock(tasks.db)
        values = {
            "status": transition.target,
            "owner": name,
            "lease_length": lease_length,
            "leases": F("leases") + 1,
            "handler_started": reservation is None,
            "updated": now,
        }
        # The time past which each lease is never extended (None: no run-time limit).
        caps: dict[int, datetime | None] = {}
        for row in found[:limit]:
            timeout = row[6] if row[6] is not None else timeouts.get(row[5])
            caps[row[1]] = None if timeout is None else now + timeout + timeout_grace

        def capped(cap: datetime | None) -> dict[str, Any]:
            deadline = now + (lease_length if reservation is None else reservation)
            return {"deadline": deadline if cap is None else min(deadline, cap), "timeout_at": cap}

        # The plain tasks in one UPDATE per cap (as many as run-time limits among them).
        by_cap: dict[datetime | None, list[int]] = {}
        for pk in plain:
            by_cap.setdefault(caps[pk], []).append(pk)
        leased = 0
        for cap, pks in by_cap.items():
            leased += base.filter(pk__in=pks).update(**values, **capped(cap))
        # The tasks with keys one at a time, in lease order, so that the take trigger judges
        # each after the ones ahead of it: one UPDATE of them all meets its rows in pk order
        # (SQLite walks `pk IN (...)` sorted), and a later task took an earlier one's room.
        for pk in with_keys:
            leased += base.filter(pk=pk).update(**values, **capped(caps[pk]))
        if leased != len(ids):  # the key trigger passed over tasks whose keys are not free
            ids = list(
                tasks.filter(pk__in=ids, status=transition.target, owner=name, updated=now)
                .order_by()
                .values_list("pk", flat=True)
            )
        History.objects.using(tasks.db).bulk_create(
            History(task_id=task_pk, typ=event(Operation.LEASE), worker=name, time=now)
            for task_pk in ids
        )
        return list(tasks.filter(pk__in=ids).order_by(*order))


def lease_rn(
    tasks: models.QuerySet[Any], pk: int, name: str, rn: str, lease_length: timedelta
) -> Any | None:
    """Lease the ready task `rn` for the worker `name` (pk `pk`), whatever its queue's settings
    and its `not_before` say: a task run by hand. None if it is not ready or the worker may not
    lease. One conditional UPDATE and its History row, in one transaction, on every vendor (the
    key triggers still refuse a task whose keys are not free)."""
    transition = TRANSITIONS[Operation.LEASE]
    tasks = tasks.model.objects.using(tasks.db)
    with db.write_atomic(tasks.db):
        if not Worker.objects.using(tasks.db).filter(pk=pk, stopped__isnull=True).exists():
            return None
        now = db.read_clock(tasks.db)
        leased = tasks.filter(rn=rn, status__in=sources(Operation.LEASE)).update(
            status=transition.target,
            owner=name,
            deadline=now + lease_length,
            # A debug run does not enforce the run-time limit (docs/howto/timeouts.md): no cap,
            # nor one left by an earlier lease.
            timeout_at=None,
            lease_length=lease_length,
            leases=F("leases") + 1,
            handler_started=True,  # run at once, on the caller's thread
            updated=now,
        )
        if not leased:
            return None
        task = tasks.get(rn=rn)
        History.objects.using(tasks.db).create(
            task_id=task.pk, typ=event(Operation.LEASE), worker=name, time=now
        )
        return task


def finish(
    tasks: models.QuerySet[Any], name: str, rows: list[dict[str, Any]]
) -> dict[int, datetime]:
    """Complete or abort the leases in `rows`; as `db.postgresql_finish`."""
    manager = tasks.model.objects.using(tasks.db)
    done: dict[int, datetime] = {}
    with db.write_atomic(tasks.db):
        now = db.read_clock(tasks.db)
        for row in rows:
            completed = row["status"] == Status.COMPLETED
            values: dict[str, Any] = {
                "status": row["status"],
                "deadline": None,
                "cpu_time": row.get("cpu_time"),
                "peak_memory": row.get("peak_memory"),
            }
            if row.get("log"):
                values["log"] = row["log"]
            if completed:
                values.update(progress=1.0, result=row["result"])
            else:
                values["errors"] = row["errors"]
            fenced = manager.filter(
                pk=row["id"], status=Status.RUNNING, owner=name, leases=row["lease"]
            )
            if fenced.update(updated=now, **values):
                done[row["id"]] = now
        events = {Status.COMPLETED: EventType.COMPLETION, Status.ABORTED: EventType.ABORT}
        written = list(
            manager.filter(pk__in=done).values_list("pk", "status", "progress", "batch_id")
        )
        History.objects.using(tasks.db).bulk_create(
            History(
                task_id=pk, typ=events[Status(status)], worker=name, progress=progress, time=now
            )
            for pk, status, progress, _ in written
        )
        count_finished(
            tasks.db,
            [
                {"batch_id": batch, "status": status}
                for _, status, _, batch in written
                if status == Status.COMPLETED
            ],
        )
    return done
