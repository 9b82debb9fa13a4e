"""Which path a database takes: the one place that tells the vendors apart.

- PostgreSQL: every transition is one statement, submissions are prepared and pipelined, and
  LISTEN/NOTIFY wakes workers.
- SQLite: no row locks, so every write transaction takes the write lock at BEGIN (see
  `transactions`); an INSERT or UPDATE can return its rows.
- Anything else (MySQL/MariaDB 10.6+): the portable ORM path.

Every other module of this room asks these functions, never `connection.vendor` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper


def is_postgresql(connection: BaseDatabaseWrapper) -> bool:
    """Whether `connection` is PostgreSQL's."""
    return connection.vendor == "postgresql"


def is_sqlite(connection: BaseDatabaseWrapper) -> bool:
    """Whether `connection` is SQLite's."""
    return connection.vendor == "sqlite"


def configures_sqlite(database: Mapping[str, Any]) -> bool:
    """Whether `database`, an entry of `settings.DATABASES`, is an SQLite database (read from
    its ENGINE, without connecting: for the system checks)."""
    return "sqlite" in database.get("ENGINE", "")


def configures_mysql(database: Mapping[str, Any]) -> bool:
    """Whether `database`, an entry of `settings.DATABASES`, is a MySQL/MariaDB database (read
    from its ENGINE, without connecting: for the system checks)."""
    return "mysql" in database.get("ENGINE", "")


def configures_postgresql(database: Mapping[str, Any]) -> bool:
    """Whether `database`, an entry of `settings.DATABASES`, is a PostgreSQL database (read
    from its ENGINE, without connecting: for the system checks)."""
    return "postgres" in database.get("ENGINE", "")


def configures_transaction_pooling(database: Mapping[str, Any]) -> bool:
    """Whether `database` goes through a transaction-mode pooler, as its settings say:
    Django asks for `DISABLE_SERVER_SIDE_CURSORS = True` there (a server-side cursor cannot
    outlive its transaction's server connection), and this app reads it the same way."""
    return configures_postgresql(database) and bool(database.get("DISABLE_SERVER_SIDE_CURSORS"))


def uses_single_statement_transitions(connection: BaseDatabaseWrapper) -> bool:
    """PostgreSQL: each transition, History row included, is one statement (one round trip)."""
    return is_postgresql(connection)


def returns_written_rows(connection: BaseDatabaseWrapper) -> bool:
    """PostgreSQL and SQLite (3.35+): an INSERT … ON CONFLICT DO NOTHING, or an UPDATE, can
    return the rows it wrote (`RETURNING`)."""
    return is_postgresql(connection) or is_sqlite(connection)


def enforces_unique_keys(connection: BaseDatabaseWrapper) -> bool:
    """Whether the partial unique index of unique keys exists on `connection`'s database
    (PostgreSQL, SQLite). MySQL/MariaDB have no partial indexes: Django does not create it
    there, so a key would not be enforced, and a keyed submission is refused."""
    return bool(connection.features.supports_partial_indexes)


def can_listen(using: str) -> bool:
    """Whether workers on database `using` can be woken by LISTEN/NOTIFY (PostgreSQL);
    elsewhere they only poll."""
    return is_postgresql(connections[using])


def has_planner_estimates(using: str) -> bool:
    """Whether database `using` can estimate a row count from its planner's statistics
    (PostgreSQL), so that a big table need not be counted."""
    return is_postgresql(connections[using])
