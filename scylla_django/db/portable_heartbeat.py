"""The ORM's heartbeat of many leases (SQLite, MySQL/MariaDB): a statement per chunk of
leases, each row fenced on its lease, extending the deadline (a reservation's by its own
length) and writing the progress reported (PostgreSQL's is one statement:
`postgresql.postgresql_heartbeat`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db.models import (
    BooleanField,
    Case,
    DateTimeField,
    F,
    FloatField,
    Q,
    Value,
    When,
)

from ..enums import Operation, sources
from .clock import Now, now_plus
from .conditions import NOT_YIELDED, capped_deadline
from .portable import update_returning_pks
from .tables import Tables

#: Leases per heartbeat statement: a pair of parameters each, well under every vendor's limit.
HEARTBEAT_CHUNK = 500


def portable_heartbeat(
    tables: Tables,
    using: str,
    worker: str,
    leases: Sequence[tuple[int, int, float | None, bool]],
    lease_length: timedelta,
    reservation: timedelta | None = None,
) -> set[int]:
    """Extend the `leases` of `worker` (pk, lease number, progress or None, whether its
    handler has started), a statement per `HEARTBEAT_CHUNK` of them; return the pks extended.
    Checkpoints are not written here: the caller writes them in a statement of its own."""
    extended: set[int] = set()
    for start in range(0, len(leases), HEARTBEAT_CHUNK):
        part = leases[start : start + HEARTBEAT_CHUNK]
        extended |= _heartbeat_chunk(tables, using, worker, part, lease_length, reservation)
    return extended


def _heartbeat_chunk(
    tables: Tables,
    using: str,
    worker: str,
    leases: Sequence[tuple[int, int, float | None, bool]],
    lease_length: timedelta,
    reservation: timedelta | None,
) -> set[int]:
    held = Q()
    for pk, lease, _, _ in leases:
        held |= Q(pk=pk, leases=lease)
    fenced = (
        tables.task._default_manager.using(using)
        .filter(held, status__in=sources(Operation.HEARTBEAT), owner=worker)
        .filter(NOT_YIELDED)
    )
    started = sorted(pk for pk, _, _, begun in leases if begun)
    full = capped_deadline(now_plus(lease_length))
    values: dict[str, Any] = {"deadline": full, "updated": Now()}
    if reservation is not None:
        # A lease whose handler has not started (nor is told now to have) stays a
        # reservation.
        begun = Q(handler_started=True) | Q(pk__in=started)
        values["deadline"] = Case(
            When(begun, then=full),
            default=capped_deadline(now_plus(reservation)),
            output_field=DateTimeField(),
        )
    if started:
        values["handler_started"] = Case(
            When(pk__in=started, then=Value(True)),
            default=F("handler_started"),
            output_field=BooleanField(),
        )
    progress = [When(pk=pk, then=Value(value)) for pk, _, value, _ in leases if value is not None]
    if progress:
        values["progress"] = Case(*progress, default=F("progress"), output_field=FloatField())
    return update_returning_pks(fenced, values)
