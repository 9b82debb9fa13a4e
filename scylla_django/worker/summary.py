"""What a worker did since its last summary: the counts of its INFO summary lines."""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("scylla_django")

KINDS = ("completed", "aborted", "snoozed", "stopped", "not written")


class Summary:
    """Counts of finished tasks by kind (`KINDS`), logged and reset by `log()`, and by
    `log_when_due()` every `interval` seconds."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(KINDS, 0)
        self._last = time.monotonic()

    def count(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] += n

    def log(self, name: str, in_hand: int) -> None:
        """Log the counts since the last summary, if any, and start again from zero."""
        with self._lock:
            counts = dict(self._counts)
            self._counts = dict.fromkeys(KINDS, 0)
        if any(counts.values()):
            logger.info(
                "%s: %s; %d in flight",
                name,
                ", ".join(f"{n} {kind}" for kind, n in counts.items() if n),
                in_hand,
            )

    def log_when_due(self, name: str, in_hand: int) -> None:
        """`log()`, if `interval` seconds have passed since the last time it was due."""
        now = time.monotonic()
        if now >= self._last + self.interval:
            self._last = now
            self.log(name, in_hand)
