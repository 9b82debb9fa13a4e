"""The transaction of a state change, per vendor.

- PostgreSQL and MySQL/MariaDB: `transaction.atomic`; writers meet on row locks (`SELECT …
  FOR UPDATE`, with SKIP LOCKED where a set operation may pass another's rows by).
- SQLite: there are no row locks, so writers are serialised instead. Every write transaction
  of this app begins with `BEGIN IMMEDIATE` (it takes the database write lock up front and
  waits up to the busy timeout for it), so a transaction that reads and then writes can never
  lose the lock race with "database is locked".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections, transaction

from .vendors import is_sqlite


@contextmanager
def write_atomic(using: str) -> Iterator[None]:
    """`transaction.atomic(using)` that takes the write lock at BEGIN on SQLite.

    On SQLite, the outermost block is opened with `BEGIN IMMEDIATE` whatever the database's
    `transaction_mode` option says (the connection is opened first if needed, because opening it
    sets the mode from the options). Nested in a transaction the caller opened, it is a
    savepoint, and the caller's transaction decides (set `"transaction_mode": "IMMEDIATE"` in
    OPTIONS; the system check scylla_django.W002 says so). Elsewhere it is `transaction.atomic`.
    """
    connection = connections[using]
    if not is_sqlite(connection) or connection.in_atomic_block:
        with transaction.atomic(using=using):
            yield
        return
    # Opening the connection reads `transaction_mode` from OPTIONS: open it before overriding.
    connection.ensure_connection()
    previous = getattr(connection, "transaction_mode", None)
    connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
    try:
        with transaction.atomic(using=using):
            connection.transaction_mode = previous  # type: ignore[attr-defined]
            yield
    finally:
        connection.transaction_mode = previous  # type: ignore[attr-defined]
