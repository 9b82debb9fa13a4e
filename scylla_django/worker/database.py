"""The worker's database connections: waiting out an outage (through `db.DatabaseRetry`) and a
handler thread's connection of its own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.db import Error as DatabaseError
from django.db import close_old_connections, connections

from .. import db

logger = logging.getLogger("scylla_django")

T = TypeVar("T")


def close_handler_connections() -> None:
    """Close the connections a handler's own queries opened, as at the end of a request."""
    if any(c.connection is not None for c in connections.all(initialized_only=True)):
        close_old_connections()


def retry(action: Callable[[], T], what: str, *, using: str, stop: threading.Event) -> T | None:
    """`action()`, tried again through database errors until it succeeds (its value) or `stop`
    is set (None)."""
    failures = db.DatabaseRetry(using)
    while not stop.is_set():
        try:
            return action()
        except DatabaseError as exc:
            wait = failures.failed()
            logger.warning("cannot %s (%s); retrying in %gs", what, exc, wait)
            stop.wait(wait)
    return None


class OwnConnections:
    """A connection per handler thread for the worker's writes, kept open between tasks,
    apart from the one the handler's queries use (which Django closes at the end of each
    task, as at the end of a request, under `CONN_MAX_AGE = 0`)."""

    def __init__(self, using: str) -> None:
        self.using = using
        self._local = threading.local()

    @contextmanager
    def used(self) -> Iterator[None]:
        """Run the block on this thread's own connection, made on first use."""
        own = getattr(self._local, "connection", None)
        if own is None:
            own = self._local.connection = connections.create_connection(self.using)
        handlers = connections[self.using]
        connections[self.using] = own
        try:
            yield
        finally:
            connections[self.using] = handlers

    def close(self) -> None:
        """Close this thread's own connection, if it made one."""
        own = getattr(self._local, "connection", None)
        if own is not None:
            own.close()
