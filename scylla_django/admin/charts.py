"""The dashboard's charts per queue over a chosen range: throughput, failures and wait time.

All three count History's events (through the rollups once the monitor has made them, see
below); read from History itself, one grouped query over one range of its
`scylla_history_typ_time_idx` (`typ`, `time`, `task_id`) joined to the tasks for their queue:

- throughput and failures: `TaskCompletion` and `TaskAbort` events counted per interval and
  queue;
- wait: per interval and queue, the median and 95th percentile of the time from submission (or
  from `not_before`, when later) to the start of the tasks' first lease, over the
  `TaskAssignment` events of tasks leased once (a task leased again after a timeout or a yield
  has lost the time it became ready again). PostgreSQL computes the percentiles
  (`percentile_cont`, in the same query); other databases send the waits, and Python does.

Intervals are whole minutes (last hour) or hours (last day, last week), truncated in the current
time zone. Once the monitor's `QueueRollups` has run, a request reads what it rolled up
(`rolled_intervals`): the hour rows (last day, last week) and minute rows of the range, and
from History only the minutes since the last one rolled up; the waits' median and p95 are then
estimated from the rollups' histograms (`scylla_django.models.rollups`). Before any roll-up
(a fresh project, no monitor yet), every interval comes from History as above: a closed
interval never changes, so each is read from History once and then kept in Django's cache
(`cached_intervals`). The few busiest queues are drawn; the counts of the others are summed as
"other".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from django.core.cache import cache
from django.db.models import Count, Q
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise

from .. import db
from ..durations import short
from ..enums import EventType
from ..models import (
    SETTLED,
    History,
    QueueRollup,
    Tallies,
    first_lease,
    tally_history,
    wait_to_start,
)

QUEUE_LIMIT = 6
CACHE_PREFIX = "scylla_django:charts"
OTHER = "other"
WIDTH = 600
HEIGHT = 120
TICKS = 4


@dataclass(frozen=True)
class Range:
    """A choice of the range selector: how far back, and the length of one interval."""

    key: str
    label: StrOrPromise
    span: timedelta
    step: timedelta
    truncate: Callable[[str], Any]

    @property
    def points(self) -> int:
        return int(self.span / self.step)

    def floor(self, moment: datetime, zone: tzinfo | None = None) -> datetime:
        """The start of the interval of `moment`, in `zone` (default: the current time zone)."""
        local = moment.astimezone(zone or timezone.get_current_timezone())
        local = local.replace(second=0, microsecond=0)
        return local.replace(minute=0) if self.step >= timedelta(hours=1) else local

    def first(self, now: datetime) -> datetime:
        """The start of the first interval: `points` whole intervals end with the current one."""
        return self.floor(now) - self.step * (self.points - 1)


RANGES: dict[str, Range] = {
    r.key: r
    for r in (
        Range(
            "hour", gettext_lazy("Last hour"), timedelta(hours=1), timedelta(minutes=1), TruncMinute
        ),
        Range("day", gettext_lazy("Last day"), timedelta(days=1), timedelta(hours=1), TruncHour),
        Range("week", gettext_lazy("Last week"), timedelta(days=7), timedelta(hours=1), TruncHour),
    )
}
DEFAULT_RANGE = "hour"


def chosen_range(key: str | None) -> Range:
    """The range called `key`; the default (last hour) for anything else."""
    return RANGES.get(key or DEFAULT_RANGE, RANGES[DEFAULT_RANGE])


@dataclass(frozen=True)
class Line:
    """One queue's values, one per interval (None: nothing to measure), and its SVG points."""

    queue: str
    values: list[float | None]
    points: str = ""
    dashed: bool = False
    colour: int = 0


@dataclass(frozen=True)
class Chart:
    """One chart: a line per queue over the range's intervals, scaled to `peak`."""

    key: str
    title: str
    lines: list[Line]
    peak: float
    unit: str
    ticks: list[tuple[float, str]] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def peak_label(self) -> str:
        """The top of the y axis: "12/min", "3.3 s"."""
        return short(self.peak) if self.unit == "s" else f"{self.peak:g}{self.unit}"

    @property
    def total(self) -> float:
        return sum(v or 0 for line in self.lines if not line.dashed for v in line.values)


@dataclass(frozen=True)
class Charts:
    """The three charts of one range, and the range's intervals."""

    range: Range
    starts: list[datetime]
    throughput: Chart
    failures: Chart
    wait: Chart

    @property
    def ranges(self) -> list[Range]:
        return list(RANGES.values())

    def as_json(self) -> dict[str, Any]:
        """The data behind the charts, as the dashboard's chart endpoint sends it."""
        return {
            "range": self.range.key,
            "interval_seconds": self.range.step.total_seconds(),
            "starts": [start.isoformat() for start in self.starts],
            "throughput": {line.queue: line.values for line in self.throughput.lines},
            "failures": {line.queue: line.values for line in self.failures.lines},
            "wait_p50": {line.queue: line.values for line in self.wait.lines if not line.dashed},
            "wait_p95": {line.queue: line.values for line in self.wait.lines if line.dashed},
        }


@dataclass(frozen=True)
class Interval:
    """What one queue did in one interval: completions, aborts, and the waits of its starts."""

    completed: int = 0
    aborted: int = 0
    p50: float | None = None
    p95: float | None = None


def intervals(
    since: datetime, truncate: Callable[[str], Any], until: datetime | None = None
) -> dict[tuple[datetime, str], Interval]:
    """Per (interval, queue) from `since` (to `until`): completions, aborts and the median and 95th
    percentile in seconds of the waits of first leases. One query on PostgreSQL; elsewhere a
    second one sends the waits and Python takes their percentiles."""
    wait = wait_to_start()
    events = History.objects.filter(
        typ__in=[EventType.ASSIGNMENT, EventType.COMPLETION, EventType.ABORT], time__gte=since
    ).annotate(interval=truncate("time"))
    if until is not None:
        events = events.filter(time__lt=until)
    aggregates: dict[str, Any] = {
        "completed": Count("pk", filter=Q(typ=EventType.COMPLETION)),
        "aborted": Count("pk", filter=Q(typ=EventType.ABORT)),
    }
    in_database = db.driver(events.db).computes_percentiles
    if in_database:
        aggregates["p50"] = db.Percentile(wait, 0.5, filter=first_lease())
        aggregates["p95"] = db.Percentile(wait, 0.95, filter=first_lease())
    rows: Any = events.values("interval", "task__queue").annotate(**aggregates).order_by()
    found: dict[tuple[datetime, str], Interval] = {}
    for row in rows:
        p50: timedelta | None = row.get("p50")
        p95: timedelta | None = row.get("p95")
        found[(row["interval"], row["task__queue"])] = Interval(
            row["completed"],
            row["aborted"],
            p50.total_seconds() if p50 is not None else None,
            p95.total_seconds() if p95 is not None else None,
        )
    if in_database:
        return found
    grouped: dict[tuple[datetime, str], list[float]] = defaultdict(list)
    for interval, queue, value in (
        events.filter(first_lease())
        .annotate(wait=wait)
        .values_list("interval", "task__queue", "wait")
    ):
        grouped[(interval, queue)].append(value.total_seconds())
    for key, values in grouped.items():
        counted = found.get(key, Interval())
        found[key] = replace(counted, p50=percentile(values, 0.5), p95=percentile(values, 0.95))
    return found


def percentile(values: list[float], fraction: float) -> float:
    """The `fraction` percentile of `values`, interpolated as `percentile_cont` does."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def cached_intervals(
    chosen: Range, first: datetime, now: datetime
) -> dict[tuple[datetime, str], Interval]:
    """`intervals()` of the range from `first`: the settled intervals from the cache where they
    are (History does not change once written), the others and the recent ones from the database.

    An interval is settled `SETTLED` after its end, so that a History row stamped with its
    transaction's start (or by a database clock a little behind this host's) is not left out.
    Entries are per interval length and start, so the last day reuses the last week's hours;
    each lasts as long as the longest range. Purged History leaves them as they were.
    """
    starts = [first + chosen.step * n for n in range(chosen.points)]
    settled = [start for start in starts if start + chosen.step + SETTLED <= now]
    recent = starts[len(settled)]
    step = int(chosen.step.total_seconds())
    keys = {start: f"{CACHE_PREFIX}:{step}:{start.timestamp():.0f}" for start in settled}
    hits: dict[str, dict[str, Interval]] = cache.get_many(list(keys.values()))
    missing = [start for start in settled if keys[start] not in hits]
    found: dict[tuple[datetime, str], Interval] = {
        (start, queue): counted
        for start in settled
        for queue, counted in hits.get(keys[start], {}).items()
    }
    if missing:
        fresh = intervals(missing[0], chosen.truncate, until=recent)
        by_start: dict[datetime, dict[str, Interval]] = defaultdict(dict)
        for (interval, queue), counted in fresh.items():
            by_start[timezone.localtime(interval)][queue] = counted
        timeout = max(r.span for r in RANGES.values()).total_seconds()
        cache.set_many({keys[s]: by_start.get(s, {}) for s in missing}, timeout=timeout)
        found.update(((s, q), c) for s in missing for q, c in by_start.get(s, {}).items())
    found.update(intervals(recent, chosen.truncate))
    return found


def rolled_intervals(chosen: Range, first: datetime) -> dict[tuple[datetime, str], Interval] | None:
    """The range's intervals from `first` out of the rollups: hour rows (for hourly intervals)
    up to the end of the last hour rolled up, then minute rows up to the last minute rolled
    up, then History (a minute or two when the monitor keeps up). None when nothing is rolled
    up yet.

    The waits' median and p95 are estimated from the histograms (within 9% of the exact
    figures, or 1 ms; see `scylla_django.models.rollups`).
    """
    rollups = QueueRollup.objects.all()
    rolled = rollups.rolled_until(QueueRollup.MINUTE)
    if rolled is None:
        return None
    parts: list[Tallies] = []
    minutes_from = first
    if chosen.step >= timedelta(hours=1):
        hours = rollups.rolled_until(QueueRollup.HOUR)
        if hours is not None and hours > first:
            parts.append(rollups.tallies(QueueRollup.HOUR, first, hours))
            minutes_from = hours
    if minutes_from < rolled:
        parts.append(rollups.tallies(QueueRollup.MINUTE, minutes_from, rolled))
    parts.append(tally_history(rollups.db, max(minutes_from, rolled)))
    merged: Tallies = {}
    zone = timezone.get_current_timezone()
    for tallies in parts:
        for (start, queue), tally in tallies.items():
            key = (chosen.floor(start, zone), queue)
            if key in merged:
                merged[key].add(tally)
            else:
                merged[key] = tally
    return {
        key: Interval(tally.completed, tally.aborted, *tally.percentiles(0.5, 0.95))
        for key, tally in merged.items()
    }


def build(key: str | None = None, now: datetime | None = None) -> Charts:
    """The three charts of the range called `key` (default: the last hour): from the rollups,
    a handful of queries (see `rolled_intervals`); before any, one or two queries (and one more
    for the waits, but on PostgreSQL)."""
    now = now or timezone.now()
    chosen = chosen_range(key)
    first = chosen.first(now)
    starts = [first + chosen.step * n for n in range(chosen.points)]
    index = {start: n for n, start in enumerate(starts)}
    found = rolled_intervals(chosen, first)
    if found is None:
        found = cached_intervals(chosen, first, now)
    volume: dict[str, int] = defaultdict(int)
    for (_interval, queue), counted in found.items():
        volume[queue] += counted.completed + counted.aborted
    shown = sorted(volume, key=lambda q: (-volume[q], q))[:QUEUE_LIMIT]
    completed: dict[str, list[float | None]] = {}
    aborted: dict[str, list[float | None]] = {}
    p50: dict[str, list[float | None]] = {}
    p95: dict[str, list[float | None]] = {}
    for (interval, queue), counted in found.items():
        position = index.get(interval)  # aware datetimes: equal when the same instant
        if position is None:
            continue
        name = queue if queue in shown else OTHER
        for series, n in ((completed, counted.completed), (aborted, counted.aborted)):
            if n:
                values = series.setdefault(name, [0.0] * chosen.points)
                values[position] = (values[position] or 0) + n
        if queue in shown and counted.p50 is not None:
            p50.setdefault(queue, [None] * chosen.points)[position] = counted.p50
            p95.setdefault(queue, [None] * chosen.points)[position] = counted.p95
    per = "/min" if chosen.step == timedelta(minutes=1) else "/h"
    throughput = chart("throughput", _("Completed"), completed, per, chosen, first)
    failures = chart("failures", _("Aborted"), aborted, per, chosen, first)
    wait = chart("wait", _("Wait to start (median, p95 dashed)"), p50, "s", chosen, first, p95)
    return Charts(chosen, starts, throughput, failures, wait)


def chart(
    key: str,
    title: str,
    values: dict[str, list[float | None]],
    unit: str,
    chosen: Range,
    first: datetime,
    dashed: dict[str, list[float | None]] | None = None,
) -> Chart:
    """A chart of `values` (and `dashed` lines, e.g. a high percentile), each queue in its
    colour, in the order of the busiest first (then "other")."""
    names = sorted(values, key=lambda q: (q == OTHER, -sum(v or 0 for v in values[q]), q))
    colours = {name: n for n, name in enumerate(names)}
    every = [*values.values(), *(dashed or {}).values()]
    peak = max((v for vs in every for v in vs if v is not None), default=0.0)
    step = WIDTH / max(chosen.points - 1, 1)

    def points(line: list[float | None]) -> str:
        return " ".join(
            f"{n * step:.1f},{HEIGHT - (v / peak * HEIGHT if peak else 0):.1f}"
            for n, v in enumerate(line)
            if v is not None
        )

    lines = [Line(q, values[q], points(values[q]), False, colours[q]) for q in names]
    lines += [
        Line(q, line, points(line), True, colours.get(q, 0)) for q, line in (dashed or {}).items()
    ]
    label = "%H:%M" if chosen.span <= timedelta(days=1) else "%a %H:%M"
    ticks = [
        (n * step, f"{timezone.localtime(first + chosen.step * n):{label}}")
        for n in range(0, chosen.points, max(chosen.points // TICKS, 1))
    ]
    return Chart(key, title, lines, peak, unit, ticks)
