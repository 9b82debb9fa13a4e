"""The service that deals with expired leases: their tasks are made ready again, or aborted
once they have run out of leases (`Task.objects.reset_expired()`)."""

from __future__ import annotations

import logging

from ..models import Task
from ..text import plural
from .service import Service

logger = logging.getLogger("scylla_django")

RESET_INTERVAL = 1.0
"""Seconds between two resets of expired leases at most, whatever the monitor's interval."""


class ExpiredLeases(Service):
    """Resets every expired lease, `chunk_size` rows per transaction (`None`: the
    `RESET_CHUNK_SIZE` setting). Counts `reset`.

    At the monitor's interval, every second at most: a worker's lease is a reservation of a
    few seconds until its handler starts, so the tasks a crashed worker held but had not
    started are ready again within seconds of the crash (docs/howto/crashes.md). A pass
    that finds nothing expired reads the running index's few expired entries and writes
    nothing."""

    name = "expired leases"
    at_most = RESET_INTERVAL

    def __init__(self, interval: float | None = None, chunk_size: int | None = None) -> None:
        super().__init__(interval)
        self.chunk_size = chunk_size

    def work(self, using: str) -> dict[str, int]:
        reset = Task.objects.using(using).reset_expired(chunk_size=self.chunk_size)
        if reset:
            logger.info("reset %s", plural(reset, "expired lease"))
        else:
            logger.debug("no expired leases")
        return {"reset": reset}
