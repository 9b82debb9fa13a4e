"""The services that purge what has outlived its retention: terminal tasks (with their
History), the registry rows of workers and monitors long gone, and consumed events."""

from __future__ import annotations

import logging
from datetime import timedelta

from ..conf import scylla_settings
from ..durations import short
from ..models import Monitor as MonitorRecord
from ..models import Task, Worker
from ..schedules import events, firings
from ..text import plural
from .service import Service

logger = logging.getLogger("scylla_django")


class Retained(Service):
    """A purge service: `retention` is how long things are kept (`None`: the
    `SCYLLA["RETENTION"]` setting, read again at every run)."""

    def __init__(self, interval: float | None = None, retention: timedelta | None = None) -> None:
        super().__init__(interval)
        self.retention = retention

    def kept_for(self) -> timedelta:
        """The retention that applies now."""
        return scylla_settings.RETENTION if self.retention is None else self.retention


class FinishedTasks(Retained):
    """Purges terminal tasks not updated for the retention, `chunk_size` per transaction
    (`None`: the `PURGE_CHUNK_SIZE` setting). Counts `purged`."""

    name = "finished tasks"

    def __init__(
        self,
        interval: float | None = None,
        retention: timedelta | None = None,
        chunk_size: int | None = None,
    ) -> None:
        super().__init__(interval, retention)
        self.chunk_size = chunk_size

    def work(self, using: str) -> dict[str, int]:
        retention = self.kept_for()
        purged = Task.objects.using(using).purge(older_than=retention, chunk_size=self.chunk_size)
        age = short(retention)
        if purged:
            logger.info("purged %s older than %s", plural(purged, "task"), age)
        else:
            logger.debug("no terminal tasks older than %s to purge", age)
        return {"purged": purged}


class ProcessRecords(Retained):
    """Purges the registry rows of workers and monitors not seen for the retention. Counts
    `workers_purged`."""

    name = "process records"

    def work(self, using: str) -> dict[str, int]:
        retention = self.kept_for()
        workers = Worker.objects.using(using).purge(older_than=retention)
        workers += MonitorRecord.objects.using(using).purge(older_than=retention)
        if workers:
            logger.info(
                "purged %s not seen for %s",
                plural(workers, "worker record"),
                short(retention),
            )
        return {"workers_purged": workers}


class OldEvents(Retained):
    """Purges events older than the retention that a firing consumed, that no trigger
    listens to or that no trigger will count (before the watermarks of those that listen),
    and the firings left without events. Counts `events_purged`."""

    name = "old events"

    def work(self, using: str) -> dict[str, int]:
        retention = self.kept_for()
        _tasks, kinds = firings.listened(using)
        purged = events.purge_events(retention, kinds, using, firings.watermarks(using))
        if purged:
            logger.info("purged %s older than %s", plural(purged, "event"), short(retention))
        return {"events_purged": purged}
