"""The driver of a database: every operation of the state machine that a vendor writes its
own way, behind one interface, and what the database can do, by name.

The models ask `driver(using)` for the driver of a database alias and call its operations;
they never ask which vendor it is. The driver is chosen once per alias, from the vendor of
its connection, and kept:

- `PostgresqlDriver` (`postgresql_driver`): each transition, the lease, the batched finish,
  heartbeat and yield, the reset of expired leases and every submission is one statement
  (the statements themselves live in `postgresql` and `inserts`); LISTEN/NOTIFY wakes
  workers.
- `OrmDriver` (`orm_driver`), for SQLite and MySQL/MariaDB: the same operations through the
  ORM, a transaction that locks, writes the task rows, then their History rows;
  `SqliteDriver` and `MysqlDriver` differ from it only in what the database can do.

Both keep one contract, which `tests/core/test_driver_conformance.py` holds them to: a
write fenced on a lease that does not match writes nothing, a lease follows priority, turn
and age and respects the queues' settings and the keys, a heartbeat never passes the run-time
limit, and so on. The system checks, which must not connect, read a driver's capabilities
from a `DATABASES` entry (`driver_class`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from importlib import import_module
from typing import Any, ClassVar, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import connections, models
from django.db.models import QuerySet

from ..enums import Operation
from .inserts import CAPPED
from .lease_terms import LeaseTerms
from .orm_driver import MysqlDriver, OrmDriver, SqliteDriver
from .postgresql import Cursors
from .postgresql_driver import PostgresqlDriver
from .tables import Tables

__all__ = ["CAPPED", "Driver", "LeaseTerms", "driver", "driver_class", "transaction_pooled"]


class Driver(Protocol):
    """The operations the models need of a database, and what it can do.

    Each driver serves one database alias (`using`). The operations receive the querysets,
    the models or the `Tables` they work on: this room never imports the models.
    """

    using: str
    """The database alias this driver serves."""

    listens: ClassVar[bool]
    """Workers can be woken by LISTEN/NOTIFY; elsewhere they only poll."""
    estimates_rows: ClassVar[bool]
    """The planner's statistics estimate a row count, so a big table need not be counted."""
    computes_percentiles: ClassVar[bool]
    """An aggregate can take a percentile (`percentile_cont`) in the database."""
    locks_whole_database: ClassVar[bool]
    """A writer locks the whole database (no row locks): every write transaction must take
    the lock when it begins, and wait for it (SQLite's settings, system check W002)."""
    has_partial_indexes: ClassVar[bool]
    """Partial indexes exist, and with them the unique index of unique keys (system check
    W003 warns of a database without)."""
    has_vacuum_horizon: ClassVar[bool]
    """VACUUM's horizon, which a session idle in a transaction holds back (system check
    W005, the health check of the horizon)."""
    judges_caps_in_insert: ClassVar[bool]
    """A submission's insert leaves out the task of a queue with a cap on ready tasks (and
    says so); elsewhere the caller looks the caps up first."""
    submits_keyed_in_one_statement: ClassVar[bool]
    """A task with a unique key is inserted, or its key's holder returned, by one statement in
    which the unique index decides (`submit_keyed`); elsewhere the caller looks the holder up
    and inserts in one write transaction."""
    finishes_and_leases_at_once: ClassVar[bool]
    """A worker's outcomes and its next lease can be one statement (`finish_and_lease`)."""
    writes_cursors_in_heartbeat: ClassVar[bool]
    """A heartbeat's statement writes the checkpoints of the leases it extends (`heartbeat`'s
    `cursors`); elsewhere the caller writes them in a fenced transaction after it."""

    @property
    def enforces_unique_keys(self) -> bool:
        """Whether the partial unique index of unique keys exists on this database."""
        ...

    # -- notifications ----------------------------------------------------------------------

    def notify(self, channel: str, payloads: Sequence[str]) -> None:
        """Tell the listeners of `channel` each payload (nothing where nobody listens)."""
        ...

    def raise_floors(self, queues: Sequence[str]) -> None:
        """Now and then, move each of `queues`' lease floor up to its first ready task, where
        the next leases start their walks (`floors`; nothing where the lease keeps no floor).
        A floor left where it was costs walks, never tasks."""
        ...

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
        """Apply `values` to the one row `fenced` selects and write its History row
        (`operation`'s event, naming `worker` or the row's owner after the write), in one
        transaction; `notify` is `(channel, field)`: the field's value is sent on the channel.
        Returns the new values of `fields` (and of `owner`, `progress`, `updated`), or None
        if the fence matched no row: then nothing was written."""
        ...

    # -- leases -----------------------------------------------------------------------------

    def lease(self, tables: Tables, terms: LeaseTerms) -> list[Any] | None:
        """Lease up to `terms.limit` ready tasks of `terms.queues` for the worker of `terms`,
        best first (priority, then fair-share turn, then age); None if that worker is not
        registered or has stopped. A task with a run-time limit (its own `timeout`, else its
        queue's in `terms.timeouts`) gets `timeout_at = now + limit + timeout_grace` and a
        deadline no later; with a `reservation`, the deadline is now plus it and
        `handler_started` false."""
        ...

    def lease_rn(
        self, tables: Tables, worker_id: int, worker: str, rn: str, lease_length: timedelta
    ) -> Any | None:
        """Lease the ready task `rn` by hand, whatever its queue's settings and `not_before`;
        None if it is not ready, its keys are not free, or the worker may not lease."""
        ...

    def finish_and_lease(
        self, tables: Tables, terms: LeaseTerms, rows: Sequence[dict[str, Any]]
    ) -> tuple[dict[int, datetime], list[Any]]:
        """Complete the leases of `rows` (as `finish`) and lease as `lease` does, in one
        statement (only where `finishes_and_leases_at_once`): the pks written, each with its
        `updated`, and the tasks leased (none if the worker may not lease)."""
        ...

    def finish(
        self, tables: Tables, worker: str, rows: Sequence[dict[str, Any]]
    ) -> dict[int, datetime]:
        """Complete or abort the leases of `worker` in `rows` (`{id, lease, status, result,
        errors, cpu_time, peak_memory, log}`), each fenced on its lease, with their History
        rows and their batches' counters; the pks written, each with its `updated`."""
        ...

    def heartbeat(
        self,
        tables: Tables,
        worker: str,
        leases: Sequence[tuple[int, int, float | None, bool]],
        lease_length: timedelta,
        reservation: timedelta | None = None,
        cursors: Cursors | None = None,
    ) -> set[int]:
        """Extend the leases `(pk, lease number, progress or None, handler started)` of
        `worker`, each fenced as one heartbeat (running, owned, same lease, not given back),
        never past its `timeout_at`; the pks extended. `cursors` are written with them (only
        where `writes_cursors_in_heartbeat`)."""
        ...

    def yield_leases(
        self, tables: Tables, worker: str, leases: Sequence[tuple[int, int]]
    ) -> set[int]:
        """Give back the leases `(pk, lease number)` of `worker`: a deadline a second in the
        past (or its `timeout_at`, if earlier) and a TaskYield row each; the pks yielded."""
        ...

    def reset(
        self, tables: Tables, rows: Mapping[int, Mapping[str, Any]], max_leases: int | None
    ) -> tuple[datetime | None, dict[int, str]]:
        """Judge the expired leases `rows` (by pk, locked by the caller's transaction) and make
        the expired, unstarted and yielded ones ready with their TaskTimeout rows; the clock
        written with and each task's kind (`expired`, `unstarted`, `yielded`, `timed_out`,
        `exhausted`; the last two are the caller's to abort)."""
        ...

    # -- submissions ------------------------------------------------------------------------

    def submit(
        self, tasks: QuerySet[Any], values: dict[str, Any], *, unless_capped: bool = False
    ) -> tuple[int, datetime, datetime] | str | None:
        """Insert one task of the validated `values`: its `(pk, created, updated)`, or None if
        its rn exists (nothing written). With `unless_capped` (only where
        `judges_caps_in_insert`), CAPPED if its queue has a cap on ready tasks."""
        ...

    def submit_keyed(
        self, tasks: QuerySet[Any], values: dict[str, Any]
    ) -> tuple[bool, bool, list[Any]] | None:
        """Insert one keyed task in one statement unless its key is held (only where
        `submits_keyed_in_one_statement`): `(inserted, window_over, row)`, or None when
        nothing was inserted and no holder is visible."""
        ...

    def submit_many(
        self,
        tasks: QuerySet[Any],
        chunks: Callable[[int], Iterator[list[dict[str, Any]]]],
        capped: set[str],
    ) -> set[str]:
        """Insert the tasks of `chunks(size)` (validated values, a chunk of the driver's size
        at a time), skipping any whose rn exists; the rns inserted. Where
        `judges_caps_in_insert`, the rns left out for their queues' caps are added to
        `capped`."""
        ...


_drivers: dict[str, Driver] = {}


def driver(using: str) -> Driver:
    """The driver of database `using`, chosen once from its vendor and kept."""
    found = _drivers.get(using)
    if found is None:
        found = _drivers[using] = _choose(connections[using].vendor)(using)
    return found


def driver_class(database: Mapping[str, Any]) -> type[Driver]:
    """The driver class of `database`, an entry of `settings.DATABASES`, read from its ENGINE
    without connecting (for the system checks: compare its capabilities)."""
    engine = str(database.get("ENGINE", ""))
    try:
        # The backend's wrapper class names its vendor (postgis is "postgresql"), unconnected.
        vendor = str(import_module(f"{engine}.base").DatabaseWrapper.vendor)
    except (ImportError, AttributeError, ImproperlyConfigured, TypeError):
        vendor = _vendor_named(engine)  # a backend not installed here
    return _choose(vendor)


def _vendor_named(engine: str) -> str:
    """The vendor an ENGINE's name says, for a backend that cannot be imported here."""
    for word, vendor in _ENGINE_WORDS:
        if word in engine:
            return vendor
    return engine


#: Words of an ENGINE's name and the vendor each says.
_ENGINE_WORDS: tuple[tuple[str, str], ...] = (
    ("postgres", "postgresql"),
    ("postgis", "postgresql"),
    ("sqlite", "sqlite"),
    ("spatialite", "sqlite"),
    ("mysql", "mysql"),
)


#: The driver of each vendor; any other takes the ORM's portable path.
_BY_VENDOR: dict[str, type[Any]] = {
    "postgresql": PostgresqlDriver,
    "sqlite": SqliteDriver,
    "mysql": MysqlDriver,
}


def _choose(vendor: str) -> type[Any]:
    return _BY_VENDOR.get(vendor, OrmDriver)


def transaction_pooled(database: Mapping[str, Any]) -> bool:
    """Whether `database` (an entry of `settings.DATABASES`) goes through a transaction-mode
    pooler, as its settings say: Django asks for `DISABLE_SERVER_SIDE_CURSORS = True` there
    (a server-side cursor cannot outlive its transaction's server connection), and only a
    database whose workers listen is asked about it."""
    return driver_class(database).listens and bool(database.get("DISABLE_SERVER_SIDE_CURSORS"))


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting == "DATABASES":
        _drivers.clear()


setting_changed.connect(_forget)
