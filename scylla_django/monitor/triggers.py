"""The service that fires the schedules with a trigger, after writing the task events their
triggers listen to (see `scylla_django.schedules.events` and `scylla_django.schedules.firings`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from .. import schedules
from ..schedules import events, firings
from ..text import plural
from .service import Service

logger = logging.getLogger("scylla_django")


class TriggerFirings(Service):
    """Writes task events from History, releases the delayed firings that are due (a
    trigger's `delay`), then fires every schedule whose trigger is met. Counts `task_events`,
    `delayed_released` and `fired`. Schedules invalid in the settings are skipped (their own
    check reports them). Between full passes (every minute), only the triggers with new events
    of their kinds, waiting on time, or enabled or changed since are evaluated
    (`firings.Sweep`)."""

    name = "trigger firings"

    def __init__(
        self, interval: float | None = None, clock: Callable[[], datetime] | None = None
    ) -> None:
        super().__init__(interval)
        self.clock = clock
        self.sweep = firings.Sweep()

    def work(self, using: str) -> dict[str, int]:
        now = self.clock() if self.clock is not None else None
        listened, _kinds = firings.listened(using)
        written = events.record_task_events(using, listened)
        invalid = schedules.read_settings().invalid
        released = firings.release(using, now, skip=invalid)
        if released:
            logger.info("released %s after its delay", plural(len(released), "trigger firing"))
        kinds = self.sweep.kinds(using, time.monotonic())
        fired = firings.fire(using, now, skip=invalid, kinds=kinds, sweep=self.sweep)
        if fired:
            logger.info("fired %s", plural(len(fired), "trigger"))
        return {"task_events": written, "delayed_released": len(released), "fired": len(fired)}
