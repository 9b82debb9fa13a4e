"""The PostgreSQL driver: each operation one statement, as `postgresql` (the transitions, the
lease, the batched finish, heartbeat, yield and reset) and `inserts` (the submissions) write
them; `pg_notify` tells listening workers (`notifications`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.db import connections, models
from django.db.models import QuerySet

from ..enums import Operation
from . import floors, inserts, postgresql
from .lease_rn import lease_rn
from .lease_terms import LeaseTerms
from .notifications import postgresql_notify
from .tables import Tables


class PostgresqlDriver:
    """PostgreSQL: single statements, LISTEN/NOTIFY, planner estimates (see `driver.Driver`)."""

    listens: ClassVar[bool] = True
    estimates_rows: ClassVar[bool] = True
    computes_percentiles: ClassVar[bool] = True
    locks_whole_database: ClassVar[bool] = False
    has_partial_indexes: ClassVar[bool] = True
    has_vacuum_horizon: ClassVar[bool] = True
    judges_caps_in_insert: ClassVar[bool] = True
    submits_keyed_in_one_statement: ClassVar[bool] = True
    finishes_and_leases_at_once: ClassVar[bool] = True
    writes_cursors_in_heartbeat: ClassVar[bool] = True

    def __init__(self, using: str) -> None:
        self.using = using

    def __repr__(self) -> str:
        return f"PostgresqlDriver({self.using!r})"

    @property
    def enforces_unique_keys(self) -> bool:
        return bool(connections[self.using].features.supports_partial_indexes)

    def notify(self, channel: str, payloads: Sequence[str]) -> None:
        postgresql_notify(self.using, channel, payloads)

    def raise_floors(self, queues: Sequence[str]) -> None:
        floors.raise_floors_now_and_then(self.using, queues)

    def transition(
        self,
        fenced: QuerySet[Any],
        history: type[models.Model],
        values: dict[str, Any],
        fields: Sequence[str],
        operation: Operation,
        notify: tuple[str, str] | None = None,
        worker: str | None = None,
    ) -> dict[str, Any] | None:
        return postgresql.postgresql_transition(
            fenced, history, values, fields, operation, notify, worker=worker
        )

    def lease(self, tables: Tables, terms: LeaseTerms) -> list[Any] | None:
        _, leased = self._finish_and_lease(tables, terms, ())
        return leased

    def lease_rn(
        self, tables: Tables, worker_id: int, worker: str, rn: str, lease_length: timedelta
    ) -> Any | None:
        # A lease by hand is rare and the same everywhere: the ORM's conditional UPDATE.
        return lease_rn(tables, self.using, worker_id, worker, rn, lease_length)

    def finish_and_lease(
        self, tables: Tables, terms: LeaseTerms, rows: Sequence[dict[str, Any]]
    ) -> tuple[dict[int, datetime], list[Any]]:
        done, leased = self._finish_and_lease(tables, terms, rows)
        return done, leased or []

    def _finish_and_lease(
        self, tables: Tables, terms: LeaseTerms, rows: Sequence[dict[str, Any]]
    ) -> tuple[dict[int, datetime], list[Any] | None]:
        """The one lease statement, finishing `rows` first when there are any: the run-time
        limits are given per queue, in the order of the queues."""
        return postgresql.postgresql_lease(
            tables,
            self.using,
            worker_id=terms.worker_id,
            worker=terms.worker,
            queues=terms.queues,
            limit=terms.limit,
            lease_length=terms.lease_length,
            timeouts=[terms.timeouts.get(queue) for queue in terms.queues],
            timeout_grace=terms.timeout_grace,
            finish=rows,
            reservation=terms.reservation,
        )

    def finish(
        self, tables: Tables, worker: str, rows: Sequence[dict[str, Any]]
    ) -> dict[int, datetime]:
        return postgresql.postgresql_finish(tables, self.using, worker, rows)

    def heartbeat(
        self,
        tables: Tables,
        worker: str,
        leases: Sequence[tuple[int, int, float | None, bool]],
        lease_length: timedelta,
        reservation: timedelta | None = None,
        cursors: postgresql.Cursors | None = None,
    ) -> set[int]:
        return postgresql.postgresql_heartbeat(
            tables, self.using, worker, leases, lease_length, reservation, cursors
        )

    def yield_leases(
        self, tables: Tables, worker: str, leases: Sequence[tuple[int, int]]
    ) -> set[int]:
        return postgresql.postgresql_yield(tables, self.using, worker, leases)

    def reset(
        self, tables: Tables, rows: Mapping[int, Mapping[str, Any]], max_leases: int | None
    ) -> tuple[datetime | None, dict[int, str]]:
        return postgresql.postgresql_reset(tables, self.using, list(rows), max_leases)

    def submit(
        self, tasks: QuerySet[Any], values: dict[str, Any], *, unless_capped: bool = False
    ) -> tuple[int, datetime, datetime] | str | None:
        return inserts.postgresql_submit(tasks, values, unless_capped=unless_capped)

    def submit_keyed(
        self, tasks: QuerySet[Any], values: dict[str, Any]
    ) -> tuple[bool, bool, list[Any]] | None:
        return inserts.postgresql_submit_keyed(tasks, values)

    def submit_many(
        self,
        tasks: QuerySet[Any],
        chunks: Callable[[int], Iterator[list[dict[str, Any]]]],
        capped: set[str],
    ) -> set[str]:
        # Validated a chunk at a time as the statements go out (a pipeline of them).
        return inserts.postgresql_submit_many(tasks, chunks(inserts.SUBMIT_CHUNK), capped=capped)
