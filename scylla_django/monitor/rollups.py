"""The service that rolls up History into per-queue counts for the dashboard's charts, and
purges the rollups that have outlived the retention."""

from __future__ import annotations

import logging
from datetime import timedelta

from ..durations import short
from ..models import QueueRollup
from ..text import plural
from .purge import Retained

logger = logging.getLogger("scylla_django")


class QueueRollups(Retained):
    """Rolls up the minutes settled since the last roll-up (`QueueRollup.objects.roll_up()`:
    per minute and per hour, each queue's completions, aborts and first-lease waits), then
    deletes the rollups older than the retention (`None`: the `SCYLLA["RETENTION"]` setting,
    as for finished tasks). Counts `rolled_up` (rows written) and `rollups_purged`.

    Every minute by default; any number of monitors may run it at once, since a roll-up
    writes its rows by upsert with the figures History gives, never adding to a row. A run
    begins no further hour once `budget` seconds are spent, so that the first roll-up of a
    large History (a week of it) does not hold up the monitor's other services: the next runs
    go on from there.
    """

    name = "queue rollups"

    def __init__(
        self,
        interval: float | None = 60.0,
        retention: timedelta | None = None,
        budget: float | None = 5.0,
    ) -> None:
        super().__init__(interval, retention)
        self.budget = budget

    def work(self, using: str) -> dict[str, int]:
        rollups = QueueRollup.objects.using(using)
        written = rollups.roll_up(budget=self.budget)
        retention = self.kept_for()
        purged = rollups.purge(older_than=retention)
        if written:
            logger.debug("rolled up %s", plural(written, "queue rollup row"))
        if purged:
            logger.info(
                "purged %s older than %s",
                plural(purged, "queue rollup row"),
                short(retention),
            )
        return {"rolled_up": written, "rollups_purged": purged}
