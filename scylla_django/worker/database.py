"""The worker's database connections: waiting out an outage (through `db.DatabaseRetry`), the
one connection of the worker's own statements, and a handler thread's connection of its own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.db import Error as DatabaseError
from django.db import close_old_connections, connections
from django.db.backends.base.base import BaseDatabaseWrapper

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
            logger.warning(
                "cannot %s (%s); retrying in %gs%s", what, exc, wait, db.migrate_hint(exc)
            )
            stop.wait(wait)
    return None


class WorkerConnection:
    """The one connection of a worker's own statements (registration, lease, outcomes,
    heartbeats, yields, the stop), whichever thread makes them: a thread holds it for one
    call at a time (`used()`), the others wait their turn. With the listener's, a worker holds
    two connections whatever its concurrency (the handlers' own queries get Django's usual
    per-thread connections, closed after each task).

    Opened on first use, and again after `discard()` (a database error) or `close()`.
    """

    def __init__(self, using: str) -> None:
        self.using = using
        self._lock = threading.RLock()
        self._connection: BaseDatabaseWrapper | None = None

    @contextmanager
    def used(self) -> Iterator[None]:
        """Run the block on the worker's connection, alone on it."""
        with self._lock:
            if self._connection is None:
                self._connection = connections.create_connection(self.using)
                self._connection.inc_thread_sharing()  # one thread at a time, under the lock
            own = connections[self.using]
            connections[self.using] = self._connection
            try:
                yield
            finally:
                connections[self.using] = own

    def discard(self) -> None:
        """Close the connection after a database error; the next use opens a new one."""
        with self.used():
            db.discard_connection(self.using)

    def close(self) -> None:
        """Close the connection (the worker has stopped)."""
        with self._lock:
            if self._connection is not None:
                try:
                    self._connection.close()
                except DatabaseError as exc:
                    logger.debug("closing the worker's connection failed: %s", exc)


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
