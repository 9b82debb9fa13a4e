"""A handler's checkpoint on its way to the database: `ctx.checkpoint(cursor)` under a worker
keeps it here, and the worker's next heartbeat takes it and writes it in its own statement
(`TaskContext.pending_checkpoint`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class PendingCheckpoint:
    """The last checkpoint of one run that no statement has written yet, shared by the
    handler's thread (which keeps one) and the worker's heartbeat (which takes it).

    It shares the run's lock with the run's stop: a run stopped keeps nothing, so the yield
    that stops a run and then takes what is kept never misses one kept meanwhile."""

    def __init__(self, lock: threading.Lock, stopped: Callable[[], bool]) -> None:
        self._lock = lock
        self._stopped = stopped
        self._cursor: tuple[Any] | None = None
        self.rides_heartbeats = False
        """Whether checkpoints wait for the worker's next heartbeat, which writes them (set by
        a worker that heartbeats the run); else each is written at once."""

    def keep(self, cursor: Any) -> bool:
        """Keep `cursor` for the next heartbeat to write, replacing one kept before; False
        (nothing kept) if the run was stopped."""
        with self._lock:
            if self._stopped():
                return False
            self._cursor = (cursor,)
            return True

    @property
    def waiting(self) -> bool:
        """Whether a checkpoint waits for the heartbeat."""
        return self._cursor is not None

    def take(self) -> tuple[Any] | None:
        """The checkpoint kept, as `(cursor,)`, taken away (None: none)."""
        with self._lock:
            kept, self._cursor = self._cursor, None
            return kept

    def put_back(self, kept: tuple[Any]) -> None:
        """Put back a checkpoint whose write failed, unless a later one was kept meanwhile."""
        with self._lock:
            if self._cursor is None:
                self._cursor = kept
