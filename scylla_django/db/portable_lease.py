"""The ORM's lease (SQLite, MySQL/MariaDB): what PostgreSQL's lease statement does
(`postgresql.postgresql_lease`), as one write transaction that locks the limited queues'
settings, walks each queue's ready tasks in lease order, leases them and writes their History
rows."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import BooleanField, Count, ExpressionWrapper, F, Q

from ..enums import TRANSITIONS, Operation, Status, event, sources
from . import keys
from .clock import read_clock
from .conditions import due, unexpired
from .lease_terms import LeaseTerms
from .tables import Tables
from .transactions import write_atomic


def portable_lease(tables: Tables, using: str, terms: LeaseTerms) -> list[Any] | None:
    """As PostgreSQL's lease, with the limited queues' settings locked first."""
    limit = terms.limit
    transition = TRANSITIONS[Operation.LEASE]
    order = ("-priority", "turn", "created", "id")
    tasks = tables.task._default_manager.using(using)
    with write_atomic(using):
        # Lock the limited queues' settings first (in a fixed order), so that the running
        # tasks counted below cannot change until this lease commits.
        settings = list(
            tables.queue_setting._default_manager.using(using)
            .filter(queue__in=terms.queues)
            .select_for_update()
            .order_by("queue")
            .values_list("queue", "paused", "max_running")
        )
        workers = tables.worker._default_manager.using(using)
        if not workers.filter(pk=terms.worker_id, stopped__isnull=True).exists():
            return None
        paused = {queue for queue, is_paused, _ in settings if is_paused}
        limits = {q: n for q, is_paused, n in settings if n is not None and not is_paused}
        free = [q for q in terms.queues if q not in paused and q not in limits]
        budgets = dict.fromkeys(free, limit)
        if limits:
            running = dict(
                tasks.filter(status=Status.RUNNING, queue__in=list(limits))
                .order_by()
                .values_list("queue")
                .annotate(n=Count("*"))
                .values_list("queue", "n")
            )
            for queue, most in limits.items():
                budgets[queue] = max(0, min(limit, most - running.get(queue, 0)))
        walks = [(free, limit)] if free else []
        walks += [([q], budgets[q]) for q in limits if budgets[q]]
        keyed = ExpressionWrapper(Q(keys__isnull=False), output_field=BooleanField())
        found: list[tuple[int, int, datetime, int, bool, str, timedelta | None, float]] = []
        for walk, size in walks:
            found += (
                tasks.filter(status=Status.READY, queue__in=walk)
                .filter(due(), unexpired())
                # A task whose keys look busy is passed over (the take trigger decides).
                .filter(keys.free_in_walk(connections[using]))
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
        now = read_clock(using)
        values = {
            "status": transition.target,
            "owner": terms.worker,
            "lease_length": terms.lease_length,
            "leases": F("leases") + 1,
            "handler_started": terms.reservation is None,
            "updated": now,
        }
        # The time past which each lease is never extended (None: no run-time limit).
        caps: dict[int, datetime | None] = {}
        for row in found[:limit]:
            timeout = row[6] if row[6] is not None else terms.timeouts.get(row[5])
            caps[row[1]] = None if timeout is None else now + timeout + terms.timeout_grace

        def capped(cap: datetime | None) -> dict[str, Any]:
            first = terms.lease_length if terms.reservation is None else terms.reservation
            deadline = now + first
            return {
                "deadline": deadline if cap is None else min(deadline, cap),
                "timeout_at": cap,
            }

        # The plain tasks in one UPDATE per cap (as many as run-time limits among them).
        by_cap: dict[datetime | None, list[int]] = {}
        for pk in plain:
            by_cap.setdefault(caps[pk], []).append(pk)
        leased = 0
        for cap, pks in by_cap.items():
            leased += base.filter(pk__in=pks).update(**values, **capped(cap))
        # The tasks with keys one at a time, in lease order, so that the take trigger
        # judges each after the ones ahead of it: one UPDATE of them all meets its rows in
        # pk order (SQLite walks `pk IN (...)` sorted), and a later task took an earlier
        # one's room.
        for pk in with_keys:
            leased += base.filter(pk=pk).update(**values, **capped(caps[pk]))
        if leased != len(ids):  # the key trigger passed over tasks whose keys are not free
            ids = list(
                tasks.filter(pk__in=ids, status=transition.target, owner=terms.worker, updated=now)
                .order_by()
                .values_list("pk", flat=True)
            )
        tables.history._default_manager.using(using).bulk_create(
            tables.history(task_id=pk, typ=event(Operation.LEASE), worker=terms.worker, time=now)
            for pk in ids
        )
        return list(tasks.filter(pk__in=ids).order_by(*order))
