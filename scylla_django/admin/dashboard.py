"""The numbers behind the admin dashboard: plain functions returning dataclasses.

Each function is one or two queries chosen to stay cheap on a table of millions of tasks:

- counts per (queue, status): one GROUP BY that PostgreSQL answers with an index-only scan of
  `scylla_task_queue_status_idx` (about 60 ms at a million rows);
- the longest wait per queue: leasable ready tasks only, through `scylla_task_ready_idx`;
- tasks finished per minute: terminal tasks updated in the last hour (`scylla_task_terminal_idx`);
- expired leases: running tasks past their deadline (`scylla_task_running_idx`);
- workers: the alive and silent ones from the Worker registry, with the dead and stopped ones
  that still hold running tasks (one query over the running tasks, a handful at any time);
- the monitors: when the latest pass ended, and whether any monitor still runs;
- recent failures: aborted tasks of the last 24 hours (at most `FAILURE_SCAN` of them, through
  `scylla_task_terminal_idx`) grouped by queue and first error code;
- VACUUM (PostgreSQL): the app's tables' dead rows, sizes and bloat, what holds VACUUM back and
  the sessions idle in a transaction, from the catalog (`db.vacuum_report`, four small queries
  on the primary, never on a read replica).

Ages and the chart's minutes are measured on this host's clock: they are for display only,
while the selections themselves (expired, ready) use the database clock like the monitor does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Count, Max, Q
from django.db.models.fields.json import KT
from django.db.models.functions import TruncMinute
from django.utils import timezone

from .. import db
from ..conf import scylla_settings
from ..durations import ago, short
from ..enums import TERMINAL_STATUSES, Liveness, Status
from ..models import (
    SCHEDULED,
    Batch,
    Monitor,
    MonitorStatus,
    QueueSetting,
    Task,
    Worker,
    queue_tables,
)
from ..models.serving import live_worker_queues
from ..validation import worker_id, worker_name_for

STATUSES: tuple[Status, ...] = tuple(Status)
# The terminal statuses of `enums`, in the order the pages show them.
FINISHED: tuple[Status, ...] = tuple(s for s in Status if s in TERMINAL_STATUSES)
CHART_MINUTES = 60
CHART_WIDTH = 600
CHART_HEIGHT = 120
LIST_LIMIT = 20
WORKER_LIMIT = 100
# A worker touches `last_seen` every quarter of its lease length; give it a few beats of slack.
WORKER_SILENCE = timedelta(minutes=2)
# Failures are grouped over this window, and over at most this many of its newest tasks.
FAILURE_WINDOW = timedelta(hours=24)
FAILURE_SCAN = 10_000
HELD_LIMIT = 5


@dataclass(frozen=True)
class QueueRow:
    """One queue: its tasks per status, and when its longest-waiting leasable task became ready."""

    queue: str
    counts: dict[str, int]
    waiting_since: datetime | None = None
    paused: bool = False
    max_running: int | None = None
    unserved: bool = False
    """Tasks are ready to lease and no live worker leases from this queue."""

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def wait(self) -> str:
        """How long the longest-waiting task has waited ("" if none waits)."""
        if self.waiting_since is None:
            return ""
        return short(max(timezone.now() - self.waiting_since, timedelta(0)))

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
    ready task starts at `created`, or at `not_before` for a delayed task. A queue with
    leasable tasks and no live worker is marked `unserved`, as `GET /queues/` warns.
    """
    settings = {s.queue: s for s in QueueSetting.objects.all()}
    live = live_worker_queues(max_age=0)
    rows = [
        QueueRow(
            summary.queue,
            summary.counts,
            summary.waiting_since,
            paused=summary.queue in settings and settings[summary.queue].paused,
            max_running=settings[summary.queue].max_running if summary.queue in settings else None,
            unserved=summary.counts.get(Status.READY.value, 0) > 0 and summary.queue not in live,
        )
        for summary in Task.objects.queue_summaries()
    ]
    # A queue with settings but no task yet still shows, so that it can be resumed.
    known = {row.queue for row in rows}
    rows += [
        QueueRow(name, {}, None, paused=setting.paused, max_running=setting.max_running)
        for name, setting in settings.items()
        if name not in known
    ]
    return sorted(rows, key=lambda row: row.queue)


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
        return ago(self.when)


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


@dataclass(frozen=True)
class FailureGroup:
    """Aborted tasks of one queue with one (first) error code, and the latest of them."""

    queue: str
    code: str
    count: int
    latest: datetime

    @property
    def age(self) -> str:
        return ago(self.latest)


@dataclass(frozen=True)
class Failures:
    """Aborted tasks since `since`, grouped by queue and error code, most frequent first.

    `truncated`: more than `FAILURE_SCAN` tasks failed in the window, and only the newest
    `FAILURE_SCAN` were grouped (then `since` is the oldest of them).
    """

    since: datetime
    groups: list[FailureGroup]
    truncated: bool = False
    window: timedelta = FAILURE_WINDOW

    @property
    def hours(self) -> int:
        """The window in whole hours, for the heading."""
        return round(self.window.total_seconds() / 3600)

    @property
    def total(self) -> int:
        return sum(group.count for group in self.groups)


def failure_groups(
    window: timedelta = FAILURE_WINDOW, scan: int = FAILURE_SCAN, now: datetime | None = None
) -> Failures:
    """Aborted tasks of the last `window`, counted per queue and first error code: two queries.

    The first finds the `scan`-th newest aborted task of the window (an index walk of at most
    `scan` rows); the second groups the tasks from there on, so its cost is bounded whatever
    the failure rate.
    """
    since = (now or timezone.now()) - window
    aborted = Task.objects.filter(status=Status.ABORTED, updated__gte=since)
    cutoff = aborted.order_by("-updated").values_list("updated", flat=True)[scan - 1 : scan].first()
    truncated = cutoff is not None
    if cutoff is not None:
        aborted, since = aborted.filter(updated__gte=cutoff), cutoff
    rows = (
        aborted.order_by()
        .annotate(code=KT("errors__0__code"))
        .values_list("queue", "code")
        .annotate(n=Count("*"), latest=Max("updated"))
        .values_list("queue", "code", "n", "latest")
    )
    groups = [FailureGroup(queue, str(code or ""), n, latest) for queue, code, n, latest in rows]
    groups.sort(key=lambda g: (-g.count, g.queue, g.code))
    return Failures(since, groups, truncated, window)


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
    """A worker, its liveness on the database clock, and the tasks it holds."""

    id: int
    name: str
    hostname: str
    pid: int | None
    queues: list[str]
    capacity: int
    running: int
    started: datetime
    last_seen: datetime
    state: str = Liveness.ALIVE.value
    held: tuple[tuple[int, str], ...] = ()

    @property
    def seen(self) -> str:
        """When it was last seen, in words."""
        return ago(self.last_seen)

    @property
    def load(self) -> float:
        """running / capacity, for a progress bar."""
        return min(1.0, self.running / self.capacity) if self.capacity else 0.0

    @property
    def gone(self) -> bool:
        """Silent, dead or stopped while holding tasks: their leases may be reset now."""
        return self.state != Liveness.ALIVE and self.running > 0


def worker_silence() -> timedelta:
    """How long a worker may stay unseen and still be suggested in the list filters."""
    return max(WORKER_SILENCE, 3 * scylla_settings.LEASE_LENGTH)


@dataclass(frozen=True)
class Workers:
    """The workers worth a look: alive or silent, or holding running tasks whatever their
    state; the first `WORKER_LIMIT` by id, and how many workers are in each state."""

    count: int
    rows: list[WorkerRow]
    states: dict[str, int]

    @property
    def capacity(self) -> int:
        return sum(row.capacity for row in self.rows if row.state == Liveness.ALIVE)

    @property
    def running(self) -> int:
        return sum(row.running for row in self.rows)

    @property
    def state_counts(self) -> list[tuple[str, int]]:
        """(state, count) in the order of `Liveness`."""
        return [(state, self.states.get(state, 0)) for state in Liveness.values]

    @property
    def gone(self) -> list[WorkerRow]:
        """The workers that are not alive yet hold tasks."""
        return [row for row in self.rows if row.gone]


def held_tasks(owners: Iterable[str], limit: int) -> dict[str, list[tuple[int, str]]]:
    """The running tasks of `owners`, newest first: (id, rn) per owner, `limit` in all."""
    names = sorted(set(owners))
    held: dict[str, list[tuple[int, str]]] = {}
    if not names:
        return held
    rows = (
        Task.objects.filter(status=Status.RUNNING, owner__in=names)
        .order_by("-id")
        .values_list("pk", "rn", "owner")[:limit]
    )
    for pk, rn, owner in rows:
        if owner is not None:
            held.setdefault(owner, []).append((pk, rn))
    return held


def worker_board(limit: int = WORKER_LIMIT) -> Workers:
    """The workers by id with their states and running tasks: four small queries.

    Dead and stopped workers are listed only while they hold running tasks (a worker killed
    mid-task, whose leases await the monitor or a "Reset lease now").
    """
    busy = (
        Task.objects.filter(status=Status.RUNNING)
        .order_by()
        .values_list("owner")
        .annotate(n=Count("*"))
        .values_list("owner", "n")
    )
    running = {owner: n for owner, n in busy if owner is not None}
    holders = [pk for pk in (worker_id(owner) for owner in running) if pk is not None]
    shown = Worker.objects.filter(
        Worker.objects.state_q(Liveness.ALIVE)
        | Worker.objects.state_q(Liveness.SILENT)
        | Q(pk__in=holders)
    )
    workers = list(shown.with_state().order_by("id")[:limit])
    held = held_tasks((w.name for w in workers if running.get(w.name)), limit * HELD_LIMIT)
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
            state=str(getattr(w, "liveness", Liveness.ALIVE.value)),
            held=tuple(held.get(w.name, [])[:HELD_LIMIT]),
        )
        for w in workers
    ]
    return Workers(
        len(rows) if len(rows) < limit else shown.count(),
        rows,
        Worker.objects.count_by_state(),
    )


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


VACUUM_TABLES_SHOWN = 8
"""The tables the dashboard lists: those with the most dead rows (then by name)."""


@dataclass(frozen=True)
class TableRow:
    """A table as the dashboard shows it: its dead rows' and its bloat's shares in percent, and
    when VACUUM last ran on it."""

    table: db.TableVacuum
    dead: str
    bloat: str
    vacuumed: str


@dataclass(frozen=True)
class IdleRow:
    """A session idle in a transaction: for how long, and since its transaction began."""

    session: db.IdleSession
    idle: str
    open: str


@dataclass(frozen=True)
class Vacuum:
    """What VACUUM sees of database `database` (`report` None: not PostgreSQL, `vendor` says
    what it is instead)."""

    database: str
    vendor: str
    report: db.VacuumReport | None

    @property
    def tables(self) -> list[TableRow]:
        """The tables worth a look: those with rows, the most dead rows first."""
        if self.report is None:
            return []
        shown = [t for t in self.report.tables if t.live or t.dead][:VACUUM_TABLES_SHOWN]
        return [
            TableRow(
                t,
                f"{t.dead_ratio:.0%}",
                "" if t.bloat_ratio is None else f"{t.bloat_ratio:.0%}",
                ago(t.last_vacuum) if t.last_vacuum is not None else "",
            )
            for t in shown
        ]

    @property
    def idle(self) -> list[IdleRow]:
        """The sessions idle in a transaction, longest first."""
        if self.report is None:
            return []
        return [
            IdleRow(s, short(max(s.idle, timedelta(0))), short(max(s.age, timedelta(0))))
            for s in self.report.idle
        ]

    @property
    def late(self) -> bool:
        """The oldest holder of the horizon has held it longer than a minute."""
        oldest = self.report.oldest if self.report is not None else None
        return bool(oldest and oldest.age is not None and oldest.age > timedelta(minutes=1))

    @property
    def oldest_age(self) -> str:
        """How long the oldest holder's transaction has been open ("" if unknown)."""
        oldest = self.report.oldest if self.report is not None else None
        if oldest is None or oldest.age is None:
            return ""
        return short(max(oldest.age, timedelta(0)))


def vacuum(database: str = DEFAULT_DB_ALIAS) -> Vacuum:
    """The VACUUM report of `database` (a primary: a replica's statistics are its own)."""
    return Vacuum(
        database, connections[database].display_name, db.vacuum_report(database, queue_tables())
    )


@dataclass(frozen=True)
class Dashboard:
    """Everything the dashboard shows, as of `generated`."""

    generated: datetime
    queues: list[QueueRow]
    total: QueueRow
    throughput: Throughput
    expired: TaskList
    failures: list[TaskRow]
    failure_groups: Failures
    workers: Workers
    monitors: MonitorStatus
    dead: int = 0
    """Dead letters: aborted tasks given up, kept until an operator acts."""
    open_batches: int = 0
    """Batches with a callback not yet released or cancelled."""
    vacuum: Vacuum | None = None

    @property
    def statuses(self) -> tuple[Status, ...]:
        """The columns of the queue table."""
        return STATUSES

    @property
    def last_pass(self) -> str:
        """When the latest monitor pass ended: "12 s ago" ("" if none has run)."""
        last = self.monitors.last_pass
        return ago(last, self.generated) if last is not None else ""


def build(database: str = DEFAULT_DB_ALIAS) -> Dashboard:
    """Collect the dashboard: about twenty small queries, none of them a scan (`database`: the
    primary of the database shown, for the VACUUM report)."""
    now = timezone.now()
    queues = queue_table()
    return Dashboard(
        generated=now,
        queues=queues,
        total=totals(queues),
        throughput=throughput(now),
        expired=expired_leases(),
        failures=recent_failures(),
        failure_groups=failure_groups(now=now),
        workers=worker_board(),
        monitors=Monitor.objects.status(),
        dead=Task.objects.dead().count(),
        open_batches=Batch.objects.open().count(),
        vacuum=vacuum(database),
    )
