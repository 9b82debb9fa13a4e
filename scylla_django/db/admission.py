"""The lock that serialises the submissions counted against one admission key, per vendor.

A cap on ready tasks is checked by counting and inserting in one transaction; two submissions
of one key must not both count before either inserts. A queue's cap locks its `QueueSetting`
row (`SELECT … FOR UPDATE`, any vendor); an admission key has no row of its own, so:

- PostgreSQL: a transaction-level advisory lock on the key's 64-bit hash
  (`pg_advisory_xact_lock`), freed by the commit or the rollback.
- SQLite: nothing more: the submission's transaction began with `BEGIN IMMEDIATE`, which
  serialises every writer already.
- MySQL/MariaDB: not supported (`NotSupportedError`); a queue's cap works there.
"""

from __future__ import annotations

from django.db import NotSupportedError, connections

from .vendors import is_postgresql, is_sqlite

#: The namespace of the advisory locks' hashes, so that they meet no other application's.
_NAMESPACE = "scylla_django.admission:"


def lock_admission_key(using: str, key: str) -> None:
    """Take the lock of admission key `key` until the end of the current transaction."""
    connection = connections[using]
    if is_sqlite(connection):
        return
    if not is_postgresql(connection):
        raise NotSupportedError(
            "Admission keys need advisory locks (PostgreSQL) or a serialised writer (SQLite); "
            "on this database cap the queue instead (max_ready)."
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [_NAMESPACE + key])
