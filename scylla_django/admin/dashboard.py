"""The numbers behind the admin dashboard: plain functions returning dataclasses.

Each function is one or two queries chosen to stay cheap on a table of millions of tasks:

- counts per (queue, status): one GROUP BY that PostgreSQL answers with an index-only scan of
  `scylla_task_queue_status_idx` (about 60 ms at a million rows);
- the longest wait per queue: leasable ready tasks only, through `scylla_task_ready_idx`;
- tasks finished per minute: terminal tasks updated in the last hour (`scylla_task_terminal_idx`);
- expired leases: running tasks past their deadline (`scylla_task_running_idx`);
- live workers: the Worker registry, with one GROUP BY owner over the running tasks.

Ages and the chart's minutes are measured on this host's clock: they are for display only,
while the selections themselves (expired, ready) use the database clock like the monitor does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.utils import timezone

from ..conf import scylla_settings
from ..enums import TERMINAL_STATUSES, Status
from ..models import SCHEDULED, Task, Worker
from ..text import age, span
from ..validation import worker_name_for

STATUSES: tuple[Status, ...] = tuple(Status)
# The terminal statuses of `enums`, in the order the pages show them.
FINISHED: tuple[Status, ...] = tuple(s for s in Status if s in TERMINAL_STATUSES)
CHART_MINUTES = 60
CHART_WIDTH = 600
CHART_HEIGHT = 120
LIST_LIMIT = 20
WORKER_LIMIT = 100
# A worker touches `last_seen` every third of its lease timeout; give it a few beats of slack.
WORKER_SILENCE = timedelta(minutes=2)


@dataclass(frozen=True)
class QueueRow:
    """One queue: its tasks per status, and when its longest-waiting leasable task became ready."""

    queue: str
    counts: dict[str, int]
    waiting_since: datetime | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def wait(self) -> str:
        """How long the longest-waiting task has waited, in words ("" if none waits)."""
        return span(self.waiting_since) if self.waiting_since is not None else ""

    @property
    def scheduled(self) -> int:
        """Ready tasks whose `not_before` is still ahead (not in the `ready` count)."""
        return self.counts.get(SCHEDULED, 0)

    @property
    def cells(self) -> list[tuple[str, int]]:
        """(status, count) in the order of `STATUSES`, zeros included."""
        return [(status.value, self.counts.get(status.value, 0)) for status in STATUSES]


def queue_table() -> list[QueueRow]:
    """Every queue that has tasks, by name, with its counts per status and its longest wait.

    As `GET /queues/` of the API (`Task.objects.queue_summaries()`): `ready` counts leasable
    tasks only, `scheduled` the ready tasks whose `not_before` is still ahead; the wait of a
    ready task starts at `created`, or at `not_before` for a delayed task.
    """
    return [
        QueueRow(summary.queue, summary.counts, summary.waiting_since)
        for summary in Task.objects.queue_summaries()
    ]


def totals(rows: Iterable[QueueRow]) -> QueueRow:
    """The sum of `rows` as one row (its queue is empty)."""
    summed: dict[str, int] = {}
    waits: list[datetime] = []
    for row in rows:
        for status, n in row.counts.items():
            summed[status] = summed.get(status, 0) + n
        if row.waiting_since is not None:
            waits.append(row.waiting_since)
    return QueueRow("", summed, min(waits, default=None))


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


@dataclass(frozen=True)
class TaskRow:
    """A task as the dashboard lists it: `when` is its deadline, or when it failed."""

    id: int
    rn: str
    queue: str
    owner: str | None
    when: datetime
    error: str = ""
    description: str = ""

    @property
    def age(self) -> str:
        return age(self.when)


@dataclass(frozen=True)
class TaskList:
    """The first few tasks of a selection, and how many it holds in all."""

    count: int
    rows: list[TaskRow]


def expired_leases(limit: int = LIST_LIMIT) -> TaskList:
    """Running tasks past their deadline (the monitor has not reset them yet), oldest first."""
    expired = Task.objects.expired().order_by("deadline", "id")
    rows = [
        TaskRow(pk, rn, queue, owner, deadline)
        for pk, rn, queue, owner, deadline in expired.values_list(
            "pk", "rn", "queue", "owner", "deadline"
        )[:limit]
        if deadline is not None  # always, for expired(); this tells the type checker
    ]
    return TaskList(len(rows) if len(rows) < limit else expired.count(), rows)


def recent_failures(limit: int = LIST_LIMIT) -> list[TaskRow]:
    """The last aborted tasks, newest first, with their first error."""
    aborted = Task.objects.filter(status=Status.ABORTED).order_by("-updated", "-id")
    rows = []
    for pk, rn, queue, owner, updated, errors in aborted.values_list(
        "pk", "rn", "queue", "owner", "updated", "errors"
    )[:limit]:
        first = errors[0] if isinstance(errors, list) and errors else {}
        first = first if isinstance(first, dict) else {}
        error, description = str(first.get("code", "")), str(first.get("description", ""))
        rows.append(TaskRow(pk, rn, queue, owner, updated, error, description))
    return rows


def running_counts(owners: Iterable[str]) -> dict[str, int]:
    """How many tasks each of `owners` (worker names) is running: one GROUP BY."""
    names = sorted(set(owners))
    if not names:
        return {}
    rows = (
        Task.objects.filter(status=Status.RUNNING, owner__in=names)
        .order_by()
        .values_list("owner")
        .annotate(n=Count("*"))
        .values_list("owner", "n")
    )
    return {owner: n for owner, n in rows if owner is not None}


@dataclass(frozen=True)
class WorkerRow:
    """A live worker and the tasks it is running."""

    id: int
    name: str
    hostname: str
    pid: int | None
    queues: list[str]
    capacity: int
    running: int
    started: datetime
    last_seen: datetime

    @property
    def seen(self) -> str:
        """When it was last seen, in words."""
        return age(self.last_seen)

    @property
    def load(self) -> float:
        """running / capacity, for a progress bar."""
        return min(1.0, self.running / self.capacity) if self.capacity else 0.0


def worker_silence() -> timedelta:
    """How long a worker may stay unseen and still count as alive."""
    return max(WORKER_SILENCE, 3 * scylla_settings.LEASE_TIMEOUT)


def alive_ids(pks: Iterable[int]) -> set[int]:
    """Which of the workers `pks` are alive, judged on the database clock: one query."""
    wanted = sorted(set(pks))
    if not wanted:
        return set()
    alive = Worker.objects.alive(worker_silence()).filter(pk__in=wanted)
    return set(alive.values_list("pk", flat=True))


@dataclass(frozen=True)
class Workers:
    """Live workers (not stopped, seen within `worker_silence()`), the first `WORKER_LIMIT`."""

    count: int
    rows: list[WorkerRow]

    @property
    def capacity(self) -> int:
        return sum(row.capacity for row in self.rows)

    @property
    def running(self) -> int:
        return sum(row.running for row in self.rows)


def live_workers(limit: int = WORKER_LIMIT) -> Workers:
    """The live workers by name, with their running-task counts."""
    alive = Worker.objects.alive(worker_silence()).order_by("id")
    workers = list(alive[:limit])
    running = running_counts(w.name for w in workers)
    rows = [
        WorkerRow(
            id=w.pk,
            name=w.name,
            hostname=w.hostname,
            pid=w.pid,
            queues=[str(q) for q in w.queues] if isinstance(w.queues, list) else [],
            capacity=w.capacity,
            running=running.get(w.name, 0),
            started=w.started,
            last_seen=w.last_seen,
        )
        for w in workers
    ]
    return Workers(len(rows) if len(rows) < limit else alive.count(), rows)


def known_workers(limit: int = 200) -> list[str]:
    """The names of the live workers, newest first."""
    alive = Worker.objects.alive(worker_silence()).order_by("-id")
    return [worker_name_for(pk) for pk in alive.values_list("pk", flat=True)[:limit]]


def known_queues(limit: int = 200) -> list[str]:
    """Queue names served by live workers: cheap suggestions, never a scan of the tasks."""
    queues: set[str] = set()
    for names in Worker.objects.alive(worker_silence()).values_list("queues", flat=True)[:limit]:
        if isinstance(names, list):
            queues.update(str(name) for name in names)
    return sorted(queues)


@dataclass(frozen=True)
class Dashboard:
    """Everything the dashboard shows, as of `generated`."""

    generated: datetime
    queues: list[QueueRow]
    total: QueueRow
    throughput: Throughput
    expired: TaskList
    failures: list[TaskRow]
    workers: Workers

    @property
    def statuses(self) -> tuple[Status, ...]:
        """The columns of the queue table."""
        return STATUSES


def build() -> Dashboard:
    """Collect the dashboard: about eight small queries."""
    now = timezone.now()
    queues = queue_table()
    return Dashboard(
        generated=now,
        queues=queues,
        total=totals(queues),
        throughput=throughput(now),
        expired=expired_leases(),
        failures=recent_failures(),
        workers=live_workers(),
    )
