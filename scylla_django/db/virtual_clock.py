"""A virtual database clock for tests: every reading of the database's time, in every statement
of this process on one database, is shifted by an offset the test controls, so that the real
lease, monitor, retry and schedule code sees ten minutes pass at once.

- **PostgreSQL**: a schema `scylla_virtual_clock` holds `now()`, `statement_timestamp()`,
  `transaction_timestamp()` and `clock_timestamp()`, each `pg_catalog`'s plus the offset kept
  in the schema's one-row table. A session sees them instead of `pg_catalog`'s when its
  `search_path` names the schema before `pg_catalog`, which each connection made while the
  clock is installed sets first (Django's `Now()`, the statements of this room and the
  triggers all call these functions by name). Column defaults were bound to `pg_catalog`'s
  functions when the table was made: a row inserted without its `created` gets the real time.
- **SQLite**: the date functions (`strftime`, `julianday`, `datetime`, `date`, `time`,
  `unixepoch`) are replaced on each connection made while the clock is installed by ones that
  read `'now'` as the real time plus the offset, computed by SQLite's own functions on a
  private in-memory database. Column defaults call them too.
- **MySQL/MariaDB**: not supported (`django.db.NotSupportedError`).

Connections made before `install()` keep the real clock: it closes the alias's connection of
the calling thread, so a transactional test (not one wrapped in a transaction) is needed.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import NotSupportedError, connections
from django.db.backends.signals import connection_created

from .clock import read_clock

SCHEMA = "scylla_virtual_clock"
_PG_FUNCTIONS = {
    "now": "STABLE",
    "statement_timestamp": "STABLE",
    "transaction_timestamp": "STABLE",
    "clock_timestamp": "VOLATILE",
}
_SQLITE_FUNCTIONS = ("strftime", "julianday", "datetime", "date", "time", "unixepoch")


class VirtualClock:
    """The database clock of `using`, shifted by `offset` once `install()`ed (zero at first)."""

    def __init__(self, using: str = "default") -> None:
        self.using = using
        self.offset = timedelta(0)
        self._vendor = connections[using].vendor
        if self._vendor not in ("postgresql", "sqlite"):
            raise NotSupportedError(
                f"The virtual clock runs on PostgreSQL and SQLite, not {self._vendor}."
            )
        self._memory: sqlite3.Connection | None = None
        self._memory_lock = threading.Lock()
        self._uid = f"scylla_virtual_clock:{using}:{id(self)}"

    # -- the test's side ----------------------------------------------------------------------

    def install(self) -> None:
        """Shift every connection of `using` made from now on (the caller's is made again)."""
        connection = connections[self.using]
        if connection.in_atomic_block:
            raise RuntimeError(
                "The virtual clock needs a transactional test (transactional_db, "
                "TransactionTestCase): it makes the test's connection again."
            )
        if self._vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.shift (o interval NOT NULL)")
                cursor.execute(f"DELETE FROM {SCHEMA}.shift")
                cursor.execute(f"INSERT INTO {SCHEMA}.shift VALUES (interval '0')")
                for name, volatility in _PG_FUNCTIONS.items():
                    cursor.execute(
                        f"CREATE OR REPLACE FUNCTION {SCHEMA}.{name}() RETURNS timestamptz "
                        f"LANGUAGE sql {volatility} AS $$ SELECT pg_catalog.{name}() + "
                        f"COALESCE((SELECT o FROM {SCHEMA}.shift LIMIT 1), interval '0') $$"
                    )
        else:
            self._memory = sqlite3.connect(":memory:", check_same_thread=False)
        connection_created.connect(self._on_connection, dispatch_uid=self._uid, weak=False)
        connection.close()

    def uninstall(self) -> None:
        """Back to the real clock: the caller's connection is made again, the schema dropped."""
        connection_created.disconnect(dispatch_uid=self._uid)
        connection = connections[self.using]
        connection.close()
        if self._vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        elif self._memory is not None:
            self._memory.close()
            self._memory = None
        self.offset = timedelta(0)

    def set(self, offset: timedelta) -> None:
        """Shift the clock by `offset` from the real time (it may go back, never below 0)."""
        if offset < timedelta(0):
            raise ValueError("the virtual clock never runs behind the real one")
        self.offset = offset
        if self._vendor == "postgresql":
            with connections[self.using].cursor() as cursor:
                params: list[Any] = [offset]
                cursor.execute(f"UPDATE {SCHEMA}.shift SET o = %s", params)

    def advance(self, delta: timedelta) -> None:
        """Move the clock `delta` ahead (a lease expires, a backoff ends, a schedule is due)."""
        if delta < timedelta(0):
            raise ValueError("advance() moves the clock ahead: give a positive delta")
        self.set(self.offset + delta)

    def now(self) -> datetime:
        """The database clock as the code under test reads it (shifted)."""
        return read_clock(self.using)

    # -- each connection's side ---------------------------------------------------------------

    def _on_connection(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.alias != self.using:
            return
        if self._vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT set_config('search_path', %s || current_setting('search_path'), false)",
                    [f"{SCHEMA}, pg_catalog, "],
                )
            return
        for name in _SQLITE_FUNCTIONS:
            connection.connection.create_function(name, -1, self._shifted(name))

    def _shifted(self, name: str) -> Any:
        """SQLite's `name`, reading 'now' as the real time plus the offset."""

        def call(*args: Any) -> Any:
            moment = None
            values = list(args)
            for index, value in enumerate(values):
                if isinstance(value, str) and value.lower() == "now":
                    if moment is None:
                        moment = datetime.now(UTC).replace(tzinfo=None) + self.offset
                    values[index] = moment.isoformat(" ", "milliseconds")
            memory = self._memory
            if memory is None:  # uninstalled while a connection lives on
                memory = sqlite3.connect(":memory:")
            marks = ", ".join("?" * len(values))
            with self._memory_lock:
                return memory.execute(f"SELECT {name}({marks})", values).fetchone()[0]

        return call
