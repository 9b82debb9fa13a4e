"""The calendar of a schedule: its next ticks, with daylight-saving changes marked and its
windows applied (the admin's schedule page and `GET /schedules/{name}/calendar/`).

Each tick says its wall-clock time in the schedule's time zone and:

- `dst`: "gap" for a cron tick moved to the end of the hour skipped in spring (a job at 02:30
  runs at 03:00), "repeated" for a tick in the hour that happens twice in autumn (`fold` says
  which pass: 0 the first, 1 the second), "" otherwise;
- `runs`: when its task would be submitted with the windows applied (the tick itself, or the
  window's opening with `when_unmet="wait"`), None when it would be skipped or merged into a
  firing that waits; `note` says why in words.

Only the windows are applied: min_gap, max_runs and max_concurrent depend on how long runs take.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cronsim import CronSim
from django.utils.translation import gettext as _

from ..models import Schedule, WhenUnmet
from . import next_tick
from .constraints import Constraints

#: The most ticks a calendar lists.
MAX_CALENDAR = 500


@dataclass(frozen=True)
class Entry:
    """One tick of a schedule's calendar."""

    tick: datetime
    local: datetime
    dst: str
    fold: int
    runs: datetime | None
    note: str


def calendar(schedule: Schedule, now: datetime, count: int = 10) -> list[Entry]:
    """The next `count` ticks of `schedule` after `now` (UTC), marked and with windows applied;
    none for a schedule with a trigger, which fires on events instead of ticks."""
    if schedule.cron is None and schedule.every is None:
        return []
    zone = zoneinfo.ZoneInfo(schedule.timezone)
    constraints = Constraints.of(schedule)
    entries: list[Entry] = []
    waits_until: datetime | None = None
    moment = now
    for _step in range(min(count, MAX_CALENDAR)):
        moment = next_tick(schedule, moment)
        local = moment.astimezone(zone)
        dst, fold = _dst(schedule, moment, zone)
        runs: datetime | None = moment
        note = ""
        if waits_until is not None and moment < waits_until:
            runs, note = None, "merged into the firing waiting for the window"
        elif not constraints.in_window(moment):
            if constraints.when_unmet == WhenUnmet.SKIP:
                runs, note = None, f"skipped: outside window {constraints.window_text}"
            else:
                runs = waits_until = constraints.window_opens(moment)
                note = f"waits for window {constraints.window_text}"
        entries.append(Entry(moment, local, dst, fold, runs, note))
    return entries


def dst_text(entry: Entry) -> str:
    """A calendar entry's daylight-saving mark, in words ("" for none)."""
    if entry.dst == "gap":
        return _("moved to the end of the DST gap")
    if entry.dst == "repeated":
        return _("repeated hour, second pass") if entry.fold else _("repeated hour, first pass")
    return ""


def _dst(schedule: Schedule, moment: datetime, zone: zoneinfo.ZoneInfo) -> tuple[str, int]:
    """("gap" | "repeated" | "", fold) of a tick at `moment`."""
    local = moment.astimezone(zone)
    other = local.replace(fold=1 - local.fold).astimezone(UTC)
    if other != moment:
        return "repeated", local.fold
    if not schedule.cron:
        return "", 0
    wall = local.replace(tzinfo=None)
    before = (moment - timedelta(microseconds=1)).astimezone(zone).replace(tzinfo=None)
    gap_start = before + timedelta(microseconds=1)
    if gap_start < wall:  # the clock jumped forward just before this tick
        inside = next(iter(CronSim(schedule.cron, gap_start - timedelta(seconds=1))))
        if inside < wall:
            return "gap", 0
    return "", 0
