"""A loop's database connection: whether the database answers, and dropping a broken one.

A long-running loop (worker, monitor) keeps its connection between calls; after a database
error it drops it, and the next query opens a new one.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import Error as DatabaseError
from django.db import connections

logger = logging.getLogger("scylla_django")


def discard_connection(using: str) -> None:
    """Close this thread's connection to `using` (after an error, or when a loop ends); the
    next query opens a new one.

    Inside a transaction the caller opened (`atomic()`: a test case, never a loop in
    production) the connection is kept, since closing it would break that transaction. A
    broken connection may fail to close: that is logged (debug) and otherwise ignored.
    """
    connection = connections[using]
    if connection.in_atomic_block:
        return
    try:
        connection.close()
    except DatabaseError as exc:
        logger.debug("closing the database connection failed: %s", exc)


def ping(using: str) -> None:
    """Ask database `using` a trivial query; a database error if it does not answer."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def has_table(using: str, model: type[Any]) -> bool:
    """Whether the database `using` has `model`'s table (it was migrated)."""
    return str(model._meta.db_table) in connections[using].introspection.table_names()
