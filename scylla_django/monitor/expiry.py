"""The service that cancels ready tasks past their `expires_at` (`Task.objects.expire()`)."""

from __future__ import annotations

import logging

from ..models import Task
from ..text import plural
from .service import Service

logger = logging.getLogger("scylla_django")


class ExpiringTasks(Service):
    """Cancels the ready tasks whose `expires_at` has come, with the error `expired`, in
    batches of `chunk_size` (`None`: the `RESET_CHUNK_SIZE` setting). Counts `expired`."""

    name = "expiring tasks"

    def __init__(self, interval: float | None = None, chunk_size: int | None = None) -> None:
        super().__init__(interval)
        self.chunk_size = chunk_size

    def work(self, using: str) -> dict[str, int]:
        expired = Task.objects.using(using).expire(chunk_size=self.chunk_size)
        if expired:
            logger.info("cancelled %s", plural(expired, "expired task"))
        return {"expired": expired}
