"""The service that submits the task of every due schedule tick, after syncing
`SCYLLA["SCHEDULES"]` into the Schedule table (see `scylla_django.schedules`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from .. import schedules
from ..text import plural
from .peers import SaidOnce, SettingsNames
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

    Monitors with different settings (a rolling deploy) share the table: `names` publishes
    the schedule names of this monitor's settings on its registry row, and the sync leaves a
    name that a monitor started later defines to it, and keeps a schedule another running
    monitor defines (`schedules.sync_from_settings`); each is logged once.
    """

    name = "schedule ticks"

    def __init__(
        self,
        interval: float | None = None,
        clock: Callable[[], datetime] | None = None,
        names: SettingsNames | None = None,
    ) -> None:
        super().__init__(interval)
        self.clock = clock
        self.names = names if names is not None else SettingsNames()
        self.invalid: dict[str, str] = {}
        """What is wrong with each invalid schedule of the settings, by name, as last read."""
        self._said = SaidOnce()

    def work(self, using: str) -> dict[str, int]:
        now = self.clock() if self.clock is not None else None
        configured = schedules.read_settings()
        self._report(configured.invalid)
        if "" not in configured.invalid:  # the setting itself is readable
            self.names.publish("SCHEDULES", [*configured.valid, *configured.invalid])
            synced = schedules.sync_from_settings(
                configured.valid,
                using,
                now,
                keep=configured.invalid,
                peers=self.names.peers(using),
            )
            self._say(synced)
        ticks = [t for t in schedules.tick(using, now, skip=configured.invalid) if t.rn is not None]
        if ticks:
            logger.info("submitted %s", plural(len(ticks), "schedule tick"))
        return {"ticks": len(ticks)}

    def _say(self, synced: schedules.Synced) -> None:
        """Log, once while it holds, what this monitor leaves to another."""
        messages = [
            f"schedule {name!r} is not in this monitor's SCYLLA['SCHEDULES'], but {other} "
            "(running) defines it: kept while it runs"
            for name, other in sorted(synced.kept.items())
        ]
        for other in sorted(set(synced.deferred.values())):
            names = ", ".join(sorted(n for n, o in synced.deferred.items() if o == other))
            messages.append(
                f"this monitor's SCYLLA['SCHEDULES'] defines {names} otherwise than {other}, "
                "which started after it: its definitions rule while it runs"
            )
        self._said.say(messages)

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
