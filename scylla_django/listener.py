"""Wake-ups over PostgreSQL LISTEN/NOTIFY, so that a worker need not poll to react at once.

One connection per worker process listens on two channels (`db.READY_CHANNEL`, payload a queue
whose tasks became leasable; `db.STOP_CHANNEL`, payload the name of a worker whose running task
was cancelled). Notifications only make things faster: the worker still polls, so a lost
notification (or a lost connection) costs at most a poll interval or a heartbeat interval.

LISTEN needs a session of its own for as long as the worker runs. A transaction-mode pooler
(PgBouncer's `pool_mode = transaction`) cannot give one: name a database alias that reaches the
server itself (or a session-mode pool) in `SCYLLA["LISTEN_DATABASE"]`, or give a connection
string (`dsn`, `scylla_worker --listen-dsn`), while the other connections go through the
pooler. The system check `scylla_django.W004` warns of a pooled database without one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .db import READY_CHANNEL, STOP_CHANNEL, DatabaseRetry, listen

logger = logging.getLogger("scylla_django")


@dataclass(eq=False, kw_only=True)
class Listener:
    """Listens in a daemon thread and calls back: `on_ready(queue)`, `on_stop(worker_name)`.

    `on_connect()` is called each time the LISTEN is (re)established: notifications sent while
    it was down are lost, so the caller should then act as if it had been notified.
    """

    on_ready: Callable[[str], object]
    on_stop: Callable[[str], object]
    on_connect: Callable[[], object] = lambda: None
    using: str = "default"
    dsn: str | None = None
    name: str = "scylla_django"
    connected: threading.Event = field(default_factory=threading.Event, init=False)
    """Set while the LISTEN is established, once `on_connect()` has returned (tests wait on
    it)."""
    connections: int = field(default=0, init=False)
    """How many times the LISTEN was established."""
    _closed: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="scylla-listener", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening (within about half a second) and close the connection."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _run(self) -> None:
        import psycopg

        retry = DatabaseRetry()  # failed connections in a row; no Django connection to drop
        while not self._closed.is_set():
            connection = None
            try:
                connection = listen(self.using, self.dsn, self.name)
                self.connections += 1
                if retry.succeeded():
                    logger.info("%s: listening again", self.name)
                self.on_connect()
                self.connected.set()
                while not self._closed.is_set():
                    for note in connection.notifies(timeout=0.5):
                        if note.channel == READY_CHANNEL:
                            self.on_ready(note.payload)
                        elif note.channel == STOP_CHANNEL:
                            self.on_stop(note.payload)
            except psycopg.Error as exc:
                self.connected.clear()
                wait = retry.failed()
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
