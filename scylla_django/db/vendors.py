"""Which vendor a connection is, for this room's own modules (`driver` picks a database's
driver from `connection.vendor` the same way): the one place that tells the vendors apart.

- PostgreSQL: every transition is one statement, submissions are prepared and pipelined, and
  LISTEN/NOTIFY wakes workers.
- SQLite: no row locks, so every write transaction takes the write lock at BEGIN (see
  `transactions`); an INSERT or UPDATE can return its rows.
- Anything else (MySQL/MariaDB 10.6+): the ORM's portable path.

Every other module of this room asks these functions, or the driver, never `connection.vendor`
itself; outside the room, nobody asks.
"""

from __future__ import annotations

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper


def is_postgresql(connection: BaseDatabaseWrapper) -> bool:
    """Whether `connection` is PostgreSQL's."""
    return connection.vendor == "postgresql"


def is_sqlite(connection: BaseDatabaseWrapper) -> bool:
    """Whether `connection` is SQLite's."""
    return connection.vendor == "sqlite"


def returns_written_rows(connection: BaseDatabaseWrapper) -> bool:
    """PostgreSQL and SQLite (3.35+): an INSERT … ON CONFLICT DO NOTHING, or an UPDATE, can
    return the rows it wrote (`RETURNING`)."""
    return is_postgresql(connection) or is_sqlite(connection)


def can_listen(using: str) -> bool:
    """Whether workers on database `using` can be woken by LISTEN/NOTIFY (PostgreSQL);
    elsewhere they only poll."""
    return is_postgresql(connections[using])


def has_planner_estimates(using: str) -> bool:
    """Whether database `using` can estimate a row count from its planner's statistics
    (PostgreSQL), so that a big table need not be counted."""
    return is_postgresql(connections[using])
