"""LISTEN/NOTIFY (PostgreSQL only; elsewhere workers poll): the two channels, the NOTIFY of
a set operation, and the LISTEN connection of a worker process.

Payloads are plain text. The single-statement transitions and submissions send their
notifications in their own statements (`postgresql`, `inserts`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from django.db import connections

from .vendors import can_listen

READY_CHANNEL = "scylla_django_ready"
"""Payload: a queue whose tasks became leasable."""
STOP_CHANNEL = "scylla_django_stop"
"""Payload: the name of a worker whose running task was cancelled."""

# Django's own connection parameters that are not libpq's or a listener has no use for.
_DJANGO_ONLY = {"cursor_factory", "context", "prepare_threshold"}


def postgresql_notify(using: str, channel: str, payloads: Sequence[str]) -> None:
    """`pg_notify(channel, payload)` once per distinct payload (delivered when the transaction
    commits): READY_CHANNEL with queue names, STOP_CHANNEL with worker names."""
    if not payloads:
        return
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_notify(%s, p)) FROM unnest(%s::text[]) AS p",
            [channel, sorted(set(payloads))],
        )


def notify_ready(using: str, queues: Sequence[str]) -> None:
    """Tell the listening workers that `queues` have a task due now (when the transaction
    commits): PostgreSQL's NOTIFY on READY_CHANNEL; nothing where workers poll."""
    if queues and can_listen(using):
        postgresql_notify(using, READY_CHANNEL, queues)


def listen(using: str, dsn: str | None = None, name: str = "scylla_django") -> Any:
    """A new psycopg connection, in autocommit, that listens on READY_CHANNEL and STOP_CHANNEL.

    It is a session of its own, outside Django's connection handling: made from `dsn` if
    given (a transaction-mode pooler cannot keep a LISTEN), else from database `using`'s
    settings. `name` is its `application_name`. Read it with `connection.notifies()`; close it
    when done. Raises `psycopg.Error` if it cannot connect or listen.
    """
    import psycopg

    options: dict[str, Any] = {"autocommit": True, "application_name": name}
    if dsn:
        connection = psycopg.connect(dsn, **options)
    else:
        params = connections[using].get_connection_params()
        for key in _DJANGO_ONLY:
            params.pop(key, None)
        connection = psycopg.connect(**{**params, **options})
    try:
        connection.execute(f"LISTEN {READY_CHANNEL}")
        connection.execute(f"LISTEN {STOP_CHANNEL}")
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            connection.close()
        raise
    return connection
