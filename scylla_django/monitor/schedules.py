"""The service that submits the task of every due schedule tick, after syncing
`SCYLLA["SCHEDULES"]` into the Schedule table (see `scylla_django.schedules`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from .. import schedules
from ..text import plural
from .service import Service

logger = logging.getLogger("scylla_django")


class ScheduleTicks(Service):
    """Syncs the settings' schedules, then submits the due ticks. Counts `ticks`.

    `clock` is the schedules' clock (the database's when None; tests pass a fake one). Settings
    are read at every run, and Django reads them once per process: an edit to the settings
    takes effect when the monitor restarts, while schedules created or changed in the admin or
    the API are ticked from the next run.

    An invalid schedule in the settings is skipped (neither synced nor ticked; a row it left
    from an earlier, valid definition is kept, paused in effect) and logged as a warning once
    per problem; `invalid` holds what is wrong with each, by name. The others tick as usual.
    """

    name = "schedule ticks"

    def __init__(
        self, interval: float | None = None, clock: Callable[[], datetime] | None = None
    ) -> None:
        super().__init__(interval)
        self.clock = clock
        self.invalid: dict[str, str] = {}
        """What is wrong with each invalid schedule of the settings, by name, as last read."""

    def work(self, using: str) -> dict[str, int]:
        now = self.clock() if self.clock is not None else None
        configured = schedules.read_settings()
        self._report(configured.invalid)
        if "" not in configured.invalid:  # the setting itself is readable
            schedules.sync_from_settings(configured.valid, using, now, keep=configured.invalid)
        ticks = [t for t in schedules.tick(using, now, skip=configured.invalid) if t.rn is not None]
        if ticks:
            logger.info("submitted %s", plural(len(ticks), "schedule tick"))
        return {"ticks": len(ticks)}

    def _report(self, invalid: dict[str, str]) -> None:
        """Log each invalid schedule once per problem (not at every run)."""
        for name, problem in invalid.items():
            if self.invalid.get(name) != problem:
                logger.warning(
                    "schedule %r skipped: SCYLLA['SCHEDULES'][%r] is invalid: %s",
                    name,
                    name,
                    problem,
                )
        self.invalid = dict(invalid)
