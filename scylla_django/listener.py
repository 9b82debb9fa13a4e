"""Wake-ups over PostgreSQL LISTEN/NOTIFY, so that a worker need not poll to react at once.

One connection per worker process listens on two channels (`db.READY_CHANNEL`, payload a queue
whose tasks became leasable; `db.STOP_CHANNEL`, payload the name of a worker whose running task
was cancelled). Notifications only make things faster: the worker still polls, so a lost
notification (or a lost connection) costs at most a poll interval or a heartbeat interval.

LISTEN needs a session of its own for as long as the worker runs. A transaction-mode pooler
(PgBouncer's `pool_mode = transaction`) cannot give one: point `dsn` (`scylla_worker
--listen-dsn`) at the server itself, or at a session-mode pool, while the other connections go
through the pooler.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from .db import READY_CHANNEL, STOP_CHANNEL

logger = logging.getLogger("scylla_django")

MAX_BACKOFF = 1.0
# Django's own connection parameters that are not libpq's or the listener has no use for.
_DJANGO_ONLY = {"cursor_factory", "context", "prepare_threshold"}


class Listener:
    """Listens in a daemon thread and calls back: `on_ready(queue)`, `on_stop(worker_name)`.

    `on_connect()` is called each time the LISTEN is (re)established: notifications sent while
    it was down are lost, so the caller should then act as if it had been notified.
    """

    def __init__(
        self,
        *,
        on_ready: Callable[[str], object],
        on_stop: Callable[[str], object],
        on_connect: Callable[[], object] = lambda: None,
        using: str = "default",
        dsn: str | None = None,
        name: str = "scylla_django",
    ) -> None:
        self.on_ready = on_ready
        self.on_stop = on_stop
        self.on_connect = on_connect
        self.using = using
        self.dsn = dsn
        self.name = name
        self.connected = threading.Event()
        """Set while the LISTEN is established (tests wait on it)."""
        self.connections = 0
        """How many times the LISTEN was established."""
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="scylla-listener", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening (within about half a second) and close the connection."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _connect(self) -> Any:
        import psycopg

        options: dict[str, Any] = {"autocommit": True, "application_name": self.name}
        if self.dsn:
            return psycopg.connect(self.dsn, **options)
        params = connections[self.using].get_connection_params()
        for key in _DJANGO_ONLY:
            params.pop(key, None)
        return psycopg.connect(**{**params, **options})

    def _run(self) -> None:
        import psycopg

        wait = 0.0
        while not self._closed.is_set():
            connection = None
            try:
                connection = self._connect()
                connection.execute(f"LISTEN {READY_CHANNEL}")
                connection.execute(f"LISTEN {STOP_CHANNEL}")
                self.connections += 1
                self.connected.set()
                if wait:
                    logger.info("%s: listening again", self.name)
                wait = 0.0
                self.on_connect()
                while not self._closed.is_set():
                    for note in connection.notifies(timeout=0.5):
                        if note.channel == READY_CHANNEL:
                            self.on_ready(note.payload)
                        elif note.channel == STOP_CHANNEL:
                            self.on_stop(note.payload)
            except psycopg.Error as exc:
                self.connected.clear()
                wait = min(MAX_BACKOFF, wait * 2 or 0.1)
                logger.warning(
                    "%s: the LISTEN connection failed (%s); reconnecting in %gs",
                    self.name,
                    " ".join(str(exc).split()),
                    wait,
                )
                self._closed.wait(wait)
            finally:
                self.connected.clear()
                if connection is not None:
                    with contextlib.suppress(psycopg.Error):
                        connection.close()
