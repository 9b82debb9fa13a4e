"""The ORM's driver, for SQLite and MySQL/MariaDB: the operations PostgreSQL makes in one
statement (`postgresql_driver`), each as a transaction that locks, writes the task rows, then
their History rows.

SQLite has no row locks: every write transaction takes the database's write lock when it
begins (`transactions.write_atomic`), so writers are serialised. MySQL/MariaDB 10.6+ lock rows
(`SELECT … FOR UPDATE SKIP LOCKED`, then a conditional UPDATE) and have no partial indexes, so
no unique keys. `SqliteDriver` and `MysqlDriver` differ from `OrmDriver` only in what their
databases can do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.db import IntegrityError, connections, models, transaction
from django.db.models import QuerySet

from ..enums import TRANSITIONS, Operation, sources
from . import inserts
from .clock import Clock, now_plus
from .conditions import capped_deadline
from .expiry import portable_reset
from .lease_rn import lease_rn
from .lease_terms import LeaseTerms
from .portable import update_returning_pks
from .portable_finish import portable_finish
from .portable_heartbeat import portable_heartbeat
from .portable_lease import portable_lease
from .tables import Tables
from .transactions import write_atomic

#: Tasks per statement of a bulk submission.
SUBMIT_CHUNK = 500


class OrmDriver:
    """The ORM's portable path (MySQL/MariaDB, and any database without a driver of its own):
    see `driver.Driver`."""

    listens: ClassVar[bool] = False
    estimates_rows: ClassVar[bool] = False
    computes_percentiles: ClassVar[bool] = False
    locks_whole_database: ClassVar[bool] = False
    has_partial_indexes: ClassVar[bool] = False
    has_vacuum_horizon: ClassVar[bool] = False
    judges_caps_in_insert: ClassVar[bool] = False
    submits_keyed_in_one_statement: ClassVar[bool] = False
    finishes_and_leases_at_once: ClassVar[bool] = False
    writes_cursors_in_heartbeat: ClassVar[bool] = False

    def __init__(self, using: str) -> None:
        self.using = using

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.using!r})"

    @property
    def enforces_unique_keys(self) -> bool:
        return bool(connections[self.using].features.supports_partial_indexes)

    def notify(self, channel: str, payloads: Sequence[str]) -> None:
        """Nobody listens here: workers poll."""

    def raise_floors(self, queues: Sequence[str]) -> None:
        """The portable lease keeps no floor."""

    # -- one task ---------------------------------------------------------------------------

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
        """The conditional UPDATE, the row read back, and its History row, in one write
        transaction (`notify` is not sent: nobody listens)."""
        transition = TRANSITIONS[operation]
        read = list(dict.fromkeys([*fields, "owner", "progress", "updated"]))
        with write_atomic(self.using):
            changed = update_returning_pks(fenced, {"updated": Clock(), **values})
            if len(changed) != 1:
                return None
            [pk] = changed
            rows = fenced.model._default_manager.using(self.using).filter(pk=pk).values(*read)
            row: dict[str, Any] = rows[0]
            if transition.event is not None:
                history._default_manager.using(self.using).create(
                    task_id=pk,
                    typ=transition.event,
                    worker=worker or row["owner"],
                    progress=row["progress"],
                    time=row["updated"],
                )
        return row

    # -- leases -----------------------------------------------------------------------------

    def lease(self, tables: Tables, terms: LeaseTerms) -> list[Any] | None:
        """As PostgreSQL's lease, with the limited queues' settings locked first
        (`portable_lease`)."""
        return portable_lease(tables, self.using, terms)

    def lease_rn(
        self, tables: Tables, worker_id: int, worker: str, rn: str, lease_length: timedelta
    ) -> Any | None:
        return lease_rn(tables, self.using, worker_id, worker, rn, lease_length)

    def finish_and_lease(
        self, tables: Tables, terms: LeaseTerms, rows: Sequence[dict[str, Any]]
    ) -> tuple[dict[int, datetime], list[Any]]:
        raise NotImplementedError(
            "The ORM's path finishes, then leases (finishes_and_leases_at_once is false)."
        )

    def finish(
        self, tables: Tables, worker: str, rows: Sequence[dict[str, Any]]
    ) -> dict[int, datetime]:
        """One conditional UPDATE per lease, then the History rows and the batches' counters,
        in one write transaction (`portable_finish`)."""
        return portable_finish(tables, self.using, worker, rows)

    def heartbeat(
        self,
        tables: Tables,
        worker: str,
        leases: Sequence[tuple[int, int, float | None, bool]],
        lease_length: timedelta,
        reservation: timedelta | None = None,
        cursors: Any = None,
    ) -> set[int]:
        """A statement per chunk of leases (`portable_heartbeat`; the caller writes the
        `cursors`: never given here)."""
        return portable_heartbeat(tables, self.using, worker, leases, lease_length, reservation)

    def yield_leases(
        self, tables: Tables, worker: str, leases: Sequence[tuple[int, int]]
    ) -> set[int]:
        """One transition per lease, as a single yield."""
        tasks = tables.task._default_manager.using(self.using)
        deadline = capped_deadline(now_plus(timedelta(seconds=-1), Clock))
        yielded: set[int] = set()
        for pk, lease in leases:
            fenced = tasks.filter(
                pk=pk, status__in=sources(Operation.YIELD), owner=worker, leases=lease
            )
            row = self.transition(
                fenced, tables.history, {"deadline": deadline}, ["deadline"], Operation.YIELD
            )
            if row is not None:
                yielded.add(pk)
        return yielded

    def reset(
        self, tables: Tables, rows: Mapping[int, Mapping[str, Any]], max_leases: int | None
    ) -> tuple[datetime | None, dict[int, str]]:
        """Judge the locked expired `rows` and make ready those that go back to ready
        (`expiry.portable_reset`)."""
        return portable_reset(tables, self.using, rows, max_leases)

    # -- submissions ------------------------------------------------------------------------

    def submit(
        self, tasks: QuerySet[Any], values: dict[str, Any], *, unless_capped: bool = False
    ) -> tuple[int, datetime, datetime] | str | None:
        """`Model.save(force_insert=True)` in a savepoint; None if the rn exists (any other
        conflict is raised). The caps are the caller's to look up (`unless_capped` is not
        judged here)."""
        task = tasks.model(**values)
        try:
            with transaction.atomic(using=tasks.db):
                task.save(force_insert=True, using=tasks.db)
        except IntegrityError:
            if tasks.model._default_manager.using(tasks.db).filter(rn=task.rn).exists():
                return None
            raise
        created, updated = task.created, task.updated
        if not isinstance(created, datetime) or not isinstance(updated, datetime):
            # Filled in by the database, which did not return them (MySQL/MariaDB).
            found = tasks.model._default_manager.using(tasks.db).filter(pk=task.pk)
            created, updated = found.values_list("created", "updated").get()
        return task.pk, created, updated

    def submit_keyed(
        self, tasks: QuerySet[Any], values: dict[str, Any]
    ) -> tuple[bool, bool, list[Any]] | None:
        raise NotImplementedError(
            "The ORM's path looks the holder up and inserts in one write transaction "
            "(submits_keyed_in_one_statement is false)."
        )

    def submit_many(
        self,
        tasks: QuerySet[Any],
        chunks: Callable[[int], Iterator[list[dict[str, Any]]]],
        capped: set[str],
    ) -> set[str]:
        """One write transaction: an INSERT … ON CONFLICT DO NOTHING RETURNING per chunk where
        the database returns the rows written (SQLite), else a savepoint per task."""
        inserted: set[str] = set()
        with write_atomic(tasks.db):
            for chunk in chunks(SUBMIT_CHUNK):
                if inserts.can_insert_returning_on_conflict(connections[tasks.db]):
                    new = [tasks.model(**values) for values in chunk]
                    inserted |= inserts.insert_ignoring_duplicates(tasks, new)
                    continue
                for values in chunk:
                    try:
                        with transaction.atomic(using=tasks.db):
                            tasks.model(**values).save(force_insert=True, using=tasks.db)
                        inserted.add(values["rn"])
                    except IntegrityError:
                        pass
        return inserted


class SqliteDriver(OrmDriver):
    """SQLite: the ORM's path, with the database's write lock taken at BEGIN (no row locks),
    partial indexes (unique keys), and rows returned by an INSERT or UPDATE."""

    locks_whole_database: ClassVar[bool] = True
    has_partial_indexes: ClassVar[bool] = True


class MysqlDriver(OrmDriver):
    """MySQL/MariaDB 10.6+: the ORM's path, row locks with SKIP LOCKED, no partial indexes
    (so no unique keys)."""
