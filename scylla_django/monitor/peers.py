"""What this monitor's settings define, said on its registry row, and the monitors that run
beside it: the services that sync settings into tables (schedules, limits, rates) consult
them, so that monitors with different settings (a rolling deploy) do not undo each other's
work (the rules are `models.processes.Peers`'s)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..models import Monitor as MonitorRecord
from ..models.processes import Peers

logger = logging.getLogger("scylla_django")


class SettingsNames:
    """The names this monitor's settings define, by setting ("SCHEDULES", "LIMITS",
    "RATES"), published on its registry row (`record`, which the monitor attaches when it
    registers) whenever they change; a service that runs outside a monitor publishes nothing
    and counts as the newest."""

    def __init__(self) -> None:
        self.record: MonitorRecord | None = None
        self.names: dict[str, list[str]] = {}

    def attach(self, record: MonitorRecord) -> None:
        """Publish on `record` from now on (and what is known already)."""
        self.record = record
        if self.names:
            record.publish(dict(self.names))

    def publish(self, setting: str, names: Iterable[str]) -> None:
        """Say that `setting` defines these names (one UPDATE, only when they changed)."""
        given = sorted(set(names))
        if self.names.get(setting) == given:
            return
        self.names[setting] = given
        if self.record is not None:
            self.record.publish(dict(self.names))

    def peers(self, using: str) -> Peers:
        """The monitors running beside this one (one query)."""
        return MonitorRecord.objects.using(using).peers(self.record)


class SaidOnce:
    """Log each message once while it holds: a message said at the last run is not said
    again, one that stopped holding and comes back is."""

    def __init__(self) -> None:
        self.said: set[str] = set()

    def say(self, messages: Iterable[str], level: int = logging.INFO) -> None:
        """Log the `messages` not said at the last call; remember these for the next."""
        holding = list(dict.fromkeys(messages))
        for message in holding:
            if message not in self.said:
                logger.log(level, "%s", message)
        self.said = set(holding)
