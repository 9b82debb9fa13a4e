"""The service that fires the schedules with a trigger, after writing the task events their
triggers listen to (see `scylla_django.events` and `scylla_django.firings`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from .. import events, firings, schedules
from ..text import plural
from .service import Service

logger = logging.getLogger("scylla_django")


class TriggerFirings(Service):
    """Writes task events from History, then fires every schedule whose trigger is met.
    Counts `task_events` and `fired`. Schedules invalid in the settings are skipped (their
    own check reports them)."""

    name = "trigger firings"

    def __init__(
        self, interval: float | None = None, clock: Callable[[], datetime] | None = None
    ) -> None:
        super().__init__(interval)
        self.clock = clock

    def work(self, using: str) -> dict[str, int]:
        now = self.clock() if self.clock is not None else None
        listened, _kinds = firings.listened(using)
        written = events.record_task_events(using, listened)
        invalid = schedules.read_settings().invalid
        fired = firings.fire(using, now, skip=invalid)
        if fired:
            logger.info("fired %s", plural(len(fired), "trigger"))
        return {"task_events": written, "fired": len(fired)}
