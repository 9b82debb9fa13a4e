"""The service that keeps limits and rates to `SCYLLA["LIMITS"]` and `SCYLLA["RATES"]`: a row
made from the settings is set again when they change (`key_control.apply_settings`)."""

from __future__ import annotations

import logging

from django.core.exceptions import ImproperlyConfigured

from ..conf import scylla_settings
from ..models import key_control
from .peers import SaidOnce, SettingsNames
from .service import Service

logger = logging.getLogger("scylla_django")

_SETTING = {"limit": "LIMITS", "rate": "RATES"}


class LimitSettings(Service):
    """Sets each limit and rate whose settings value changed since it was last set from them
    (a change made at runtime holds until then; a name the settings lack is never touched),
    and logs each. Counts `settings_applied`.

    Settings are read at every run (Django reads them once per process: a change takes
    effect when the monitor restarts). Monitors with different settings (a rolling deploy)
    do not flap: a name that the settings of a monitor started later also give is left to
    that monitor, which this one says once (`names` publishes this monitor's names). Bad
    settings (`manage.py check` reports them, as E001) are logged once and skipped.
    """

    name = "limits and rates"

    def __init__(self, interval: float | None = None, names: SettingsNames | None = None) -> None:
        super().__init__(interval)
        self.names = names if names is not None else SettingsNames()
        self._said = SaidOnce()
        self._bad = SaidOnce()

    def work(self, using: str) -> dict[str, int]:
        try:
            limits, rates = scylla_settings.LIMITS, scylla_settings.RATES
        except ImproperlyConfigured as exc:
            self._bad.say([f"limits and rates not synced: {exc}"], logging.WARNING)
            return {"settings_applied": 0}
        self._bad.say([])
        self.names.publish("LIMITS", limits)
        self.names.publish("RATES", rates)
        peers = self.names.peers(using)
        rulers: dict[tuple[str, str], str] = {}

        def defer(setting: str, name: str) -> bool:
            newer = peers.newer_defining(setting, name)
            if newer is not None:
                rulers[setting, name] = newer.name
            return newer is not None

        changes = key_control.apply_settings(limits, rates, using, defer)
        deferred: dict[tuple[str, str], list[str]] = {}
        for change in changes:
            setting = _SETTING[change.kind]
            if change.applied:
                logger.info(
                    "%s %r set to %s by SCYLLA[%r] (it was %s)",
                    change.kind,
                    change.name,
                    change.new,
                    setting,
                    change.old,
                )
            else:
                deferred.setdefault((setting, rulers[setting, change.name]), []).append(change.name)
        self._said.say(
            f"this monitor's SCYLLA[{setting!r}] gives {', '.join(sorted(names))} other values "
            f"than {other}, which started after it: its settings rule while it runs"
            for (setting, other), names in sorted(deferred.items())
        )
        return {"settings_applied": sum(1 for change in changes if change.applied)}
