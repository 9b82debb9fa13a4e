"""The dashboard's throughput chart: tasks finished (completed, aborted, cancelled) per minute
over the last hour, from the terminal tasks updated in it (`scylla_task_terminal_idx`).

The chart's minutes are measured on this host's clock: they are for display only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.utils import timezone

from ...models import Task
from .queues import FINISHED

CHART_MINUTES = 60
CHART_WIDTH = 600
CHART_HEIGHT = 120


@dataclass(frozen=True)
class Segment:
    """One status's part of a chart bar, in SVG user units (y grows downwards)."""

    status: str
    count: int
    y: float
    height: float


@dataclass(frozen=True)
class Bar:
    """One minute of the throughput chart."""

    start: datetime
    x: float
    width: float
    segments: list[Segment]

    @property
    def total(self) -> int:
        return sum(segment.count for segment in self.segments)

    @property
    def label(self) -> str:
        """The bar's tooltip: "14:02 · 12 completed, 1 aborted"."""
        parts = [f"{s.count} {s.status}" for s in self.segments] or ["none finished"]
        return f"{timezone.localtime(self.start):%H:%M} · {', '.join(parts)}"


@dataclass(frozen=True)
class Throughput:
    """Tasks finished (completed, aborted, cancelled) per minute over the last hour."""

    since: datetime
    bars: list[Bar]
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT

    @property
    def total(self) -> int:
        return sum(bar.total for bar in self.bars)

    @property
    def peak(self) -> int:
        return max((bar.total for bar in self.bars), default=0)

    def count(self, status: str) -> int:
        """How many tasks finished in `status` over the hour."""
        return sum(s.count for bar in self.bars for s in bar.segments if s.status == status)

    @property
    def by_status(self) -> list[tuple[str, int]]:
        return [(status.value, self.count(status.value)) for status in FINISHED]

    @property
    def ticks(self) -> list[tuple[float, str]]:
        """x positions and labels of the time axis, every 15 minutes."""
        return [
            (bar.x, f"{timezone.localtime(bar.start):%H:%M}")
            for index, bar in enumerate(self.bars)
            if index % 15 == 0
        ]


def throughput(now: datetime | None = None, minutes: int = CHART_MINUTES) -> Throughput:
    """Finished tasks per minute and status for the `minutes` whole minutes up to `now`."""
    now = now or timezone.now()
    first = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    per_minute: dict[datetime, dict[str, int]] = {}
    rows = (
        Task.objects.terminal()
        .filter(updated__gte=first)
        .order_by()
        .annotate(minute=TruncMinute("updated"))
        .values_list("minute", "status")
        .annotate(n=Count("*"))
    )
    for minute, status, n in rows:
        per_minute.setdefault(minute, {})[status] = n
    peak = max((sum(c.values()) for c in per_minute.values()), default=0)
    scale = CHART_HEIGHT / peak if peak else 0.0
    slot = CHART_WIDTH / minutes
    bars = []
    for index in range(minutes):
        start = first + timedelta(minutes=index)
        counts = per_minute.get(start, {})
        segments, bottom = [], float(CHART_HEIGHT)
        for status in FINISHED:
            n = counts.get(status.value, 0)
            if n:
                height = n * scale
                bottom -= height
                segments.append(Segment(status.value, n, round(bottom, 2), round(height, 2)))
        bars.append(Bar(start, round(index * slot, 2), round(slot * 0.8, 2), segments))
    return Throughput(first, bars)
