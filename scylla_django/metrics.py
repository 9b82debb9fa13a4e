"""Prometheus metrics (`pip install "scylla-django[metrics]"`, which brings `prometheus_client`).

    from scylla_django.metrics import metrics_view
    urlpatterns = [..., path("metrics", metrics_view)]

Two kinds of metric:

- **Read from the database at each scrape** (by `TaskMetricsCollector`), so every web process
  answers alike: tasks by queue and status, the age of the oldest ready task per queue, workers
  and monitors by liveness, and the end of the latest monitor pass. A scrape never counts a
  whole table: ready and running tasks are counted exactly through their partial indexes (they
  are the backlog and the work in hand); terminal tasks are counted per queue and status up to
  `TERMINAL_COUNT_CAP` through the (queue, status) index (one statement), and past it an
  estimate from the table's statistics is reported instead (SQLite counts them exactly).
  Queues are found by skipping through that index, one probe per queue. On PostgreSQL, what
  VACUUM sees of the app's tables (`db.vacuum_report`): each table's live and dead rows, the
  dead rows' share, its size, its indexes' size and its estimated bloat; the oldest
  transaction holding VACUUM back, labelled with its session (`pid`), `application_name` and
  state; the sessions idle in a transaction, each named.
- **Counted as events happen**, in the process where they happen (signal receivers, connected
  when the app is ready): tasks leased, finished by status, leases reset, and the run time of
  each completed or aborted task, with the CPU time and peak memory its handler used when the
  worker measured them. Worker processes lease and finish, so with several processes
  set `PROMETHEUS_MULTIPROC_DIR` to an empty directory shared by the web and worker processes
  of one host (cleared at deploy); the view then adds up every process's counters, as
  prometheus_client's multi-process mode does.

Metric names follow Prometheus conventions: `scylla_` prefix, `_total` for counters, base units
(seconds), `_timestamp_seconds` for moments.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import cache
from typing import Any

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.exposition import generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        'scylla_django.metrics needs prometheus_client: pip install "scylla-django[metrics]"'
    ) from exc

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext as _

from . import db, signals
from .enums import TERMINAL_STATUSES, EventType, Status
from .models import Batch, History, Monitor, Task, Worker, queue_tables
from .routers import databases

TERMINAL_COUNT_CAP = 1000
"""Terminal tasks counted exactly per queue and status; past it, the planner's estimate."""

OPEN_BATCHES_SHOWN = 100
"""Open batches whose progress is a metric (labelled by batch id: a bounded number)."""

RUN_TIME_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600)
"""Seconds: tasks run from under a second to hours."""

CPU_TIME_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600)
"""CPU seconds a handler's run used."""

PEAK_MEMORY_BUCKETS = tuple(2**power * 1024 * 1024 for power in range(4, 15))
"""Bytes: 16 MB to 16 GB, doubling."""

# Events, counted in the process where they happen (a file per process in multi-process mode).
EVENTS = CollectorRegistry()
LEASED = Counter("scylla_tasks_leased", "Tasks leased by a worker.", ["queue"], registry=EVENTS)
FINISHED = Counter(
    "scylla_tasks_finished",
    "Tasks that reached a terminal status: completed, aborted or cancelled.",
    ["queue", "status"],
    registry=EVENTS,
)
RESET = Counter(
    "scylla_leases_reset",
    "Leases given back after they expired, or reset at once by an operator.",
    ["queue"],
    registry=EVENTS,
)
RUN_TIME = Histogram(
    "scylla_task_run_seconds",
    "From a task's last assignment to its completion or abort.",
    ["queue", "status"],
    buckets=RUN_TIME_BUCKETS,
    registry=EVENTS,
)

CPU_TIME = Histogram(
    "scylla_task_cpu_seconds",
    "CPU time a task's handler used (its thread's, or its child process's under process "
    "isolation), as the worker measured it.",
    ["queue", "status"],
    buckets=CPU_TIME_BUCKETS,
    registry=EVENTS,
)
PEAK_MEMORY = Histogram(
    "scylla_task_peak_memory_bytes",
    "Peak resident memory of the child process that ran a task's handler (process isolation).",
    ["queue", "status"],
    buckets=PEAK_MEMORY_BUCKETS,
    registry=EVENTS,
)


@cache
def _child(metric: Any, *labels: str) -> Any:
    """`metric.labels(*labels)`, looked up once per metric and label values: `labels()`
    checks its arguments and takes a lock on every call, most of what counting a finished
    task cost its worker. It returns the same child every time (the metrics here are never
    cleared), so the child kept is the one it would return."""
    return metric.labels(*labels)


def _on_leased(sender: Any, task: Task, **kwargs: Any) -> None:
    _child(LEASED, task.queue).inc()


def _on_finished(
    sender: Any, task: Task, status: str, duration: float | None = None, **kwargs: Any
) -> None:
    _child(FINISHED, task.queue, status).inc()
    if task.cpu_time is not None:
        _child(CPU_TIME, task.queue, status).observe(task.cpu_time)
    if task.peak_memory is not None:
        _child(PEAK_MEMORY, task.queue, status).observe(task.peak_memory)
    if duration is not None:  # measured by the worker that ran the handler: no query
        _child(RUN_TIME, task.queue, status).observe(max(duration, 0.0))
    elif status in (Status.COMPLETED, Status.ABORTED) and isinstance(task.updated, datetime):
        # Finished through the API: the run time is the lease's, from its TaskAssignment row.
        assigned = (
            History.objects.using(task._state.db or "default")
            .filter(task_id=task.pk, typ=EventType.ASSIGNMENT)
            .order_by("-id")
            .values_list("time", flat=True)
            .first()
        )
        if assigned is not None:
            seconds = (task.updated - assigned).total_seconds()
            _child(RUN_TIME, task.queue, status).observe(max(seconds, 0.0))


def _on_reset(sender: Any, task: Task, **kwargs: Any) -> None:
    _child(RESET, task.queue).inc()


def connect_signals() -> None:
    """Count leases, finishes and resets in this process (idempotent)."""
    signals.task_leased.connect(_on_leased, dispatch_uid="scylla_metrics_leased")
    signals.task_finished.connect(_on_finished, dispatch_uid="scylla_metrics_finished")
    signals.task_reset.connect(_on_reset, dispatch_uid="scylla_metrics_reset")


class TaskMetricsCollector(Collector):
    """Gauges read from the database at each scrape (see the module's docstring)."""

    def __init__(self, using: str = "default", cap: int | None = None) -> None:
        self.using = using
        self.cap = TERMINAL_COUNT_CAP if cap is None else cap

    def collect(self) -> Iterable[Metric]:
        tasks = GaugeMetricFamily(
            "scylla_tasks",
            "Tasks by queue and status: exact for ready and running; for terminal statuses "
            f"exact up to {self.cap} per queue, an estimate beyond.",
            labels=["queue", "status"],
        )
        oldest = GaugeMetricFamily(
            "scylla_queue_oldest_ready_age_seconds",
            "How long the oldest leasable ready task of each queue has waited.",
            labels=["queue"],
        )
        counts: dict[tuple[str, str], int] = {}
        for queue, (count, age) in Task.objects.using(self.using).ready_summary().items():
            counts[queue, Status.READY] = count
            if age is not None:
                oldest.add_metric([queue], age.total_seconds())
        running = (
            Task.objects.using(self.using)
            .filter(status=Status.RUNNING)
            .order_by()
            .values_list("queue")
            .annotate(n=Count("*"))
            .values_list("queue", "n")
        )
        for queue, count in running:
            counts[queue, Status.RUNNING] = count
        queues = self._queues()
        for key, count in self._terminal_counts(queues).items():
            counts.setdefault(key, count)
        for queue in queues:
            for active in (Status.READY, Status.RUNNING):
                counts.setdefault((queue, active), 0)
        for (queue, status), count in sorted(counts.items()):
            tasks.add_metric([queue, status], count)
        yield tasks
        yield oldest
        yield self._dead()
        yield from self._batches()
        yield from self._processes()
        yield from self._vacuum()

    # -- tasks ----------------------------------------------------------------------------------

    def _queues(self) -> list[str]:
        """Every queue that has a task: one index probe per queue, never a scan."""
        return db.queues_present(Task.objects.using(self.using))

    def _terminal_counts(self, queues: list[str]) -> dict[tuple[str, str], int]:
        """Terminal tasks per queue and status: exact up to the cap, else an estimate."""
        tasks = Task.objects.using(self.using)
        return db.capped_counts(tasks, queues, sorted(TERMINAL_STATUSES), self.cap)

    def _dead(self) -> Metric:
        """Dead letters per queue, counted through their partial index (they are few: an
        operator requeues or discards them)."""
        family = GaugeMetricFamily(
            "scylla_dead_tasks",
            "Dead letters: aborted tasks given up, kept until an operator acts.",
            labels=["queue"],
        )
        dead = (
            Task.objects.using(self.using)
            .dead()
            .order_by()
            .values_list("queue")
            .annotate(n=Count("*"))
            .values_list("queue", "n")
        )
        for queue, count in sorted(dead):
            family.add_metric([queue], count)
        return family

    def _batches(self) -> Iterator[Metric]:
        """Open batches, and the progress of the latest `OPEN_BATCHES_SHOWN` of them (read
        from their counters)."""
        open_batches = Batch.objects.using(self.using).open()
        yield GaugeMetricFamily(
            "scylla_batches_open",
            "Batches with a callback not yet released or cancelled.",
            value=open_batches.count(),
        )
        progress = GaugeMetricFamily(
            "scylla_batch_tasks",
            f"Tasks of the latest {OPEN_BATCHES_SHOWN} open batches: total, completed, failed.",
            labels=["batch", "state"],
        )
        rows = open_batches.order_by("-pk").values_list("pk", "total", "completed", "failed")
        for pk, total, completed, failed in rows[:OPEN_BATCHES_SHOWN]:
            for state, count in (("total", total), ("completed", completed), ("failed", failed)):
                progress.add_metric([str(pk), state], count)
        yield progress

    # -- processes ------------------------------------------------------------------------------

    def _processes(self) -> Iterator[Metric]:
        for name, counts, text in (
            (
                "scylla_workers",
                Worker.objects.using(self.using).count_by_state(),
                "Registered workers by liveness.",
            ),
            (
                "scylla_monitors",
                Monitor.objects.using(self.using).count_by_state(),
                "Registered monitors by liveness.",
            ),
        ):
            family = GaugeMetricFamily(name, text, labels=["state"])
            for state, count in counts.items():
                family.add_metric([state], count)
            yield family
        status = Monitor.objects.using(self.using).status()
        missing = GaugeMetricFamily(
            "scylla_monitor_missing",
            "1 when no monitor has made a pass for three of its intervals: expired leases "
            "are not being reset.",
            value=int(status.missing),
        )
        yield missing
        if status.last_pass is not None:
            yield GaugeMetricFamily(
                "scylla_monitor_last_pass_timestamp_seconds",
                "When the latest monitor pass ended (Unix time, database clock).",
                value=status.last_pass.timestamp(),
            )

    # -- vacuum ---------------------------------------------------------------------------------

    def _vacuum(self) -> Iterator[Metric]:
        """The app's tables as VACUUM sees them, and what holds VACUUM back (PostgreSQL; no
        metric elsewhere)."""
        report = db.vacuum_report(self.using, queue_tables())
        if report is None:
            return
        per_table = {
            "live_rows": ("scylla_table_live_rows", "Live rows of each table of the app."),
            "dead_rows": (
                "scylla_table_dead_rows",
                "Dead row versions of each table, not yet reclaimed by VACUUM.",
            ),
            "dead_ratio": (
                "scylla_table_dead_row_ratio",
                "Dead rows among all the rows of each table (0 to 1).",
            ),
            "size": ("scylla_table_size_bytes", "Size of each table's heap."),
            "index_size": ("scylla_table_index_size_bytes", "Size of each table's indexes."),
            "bloat": (
                "scylla_table_bloat_bytes",
                "Estimated bytes of each table's heap its live rows do not need (tables with "
                "statistics only).",
            ),
        }
        families = {
            key: GaugeMetricFamily(name, text, labels=["table"])
            for key, (name, text) in per_table.items()
        }
        for table in report.tables:
            values = {
                "live_rows": table.live,
                "dead_rows": table.dead,
                "dead_ratio": table.dead_ratio,
                "size": table.size,
                "index_size": table.index_size,
                "bloat": table.bloat,
            }
            for key, value in values.items():
                if value is not None:
                    families[key].add_metric([table.table], value)
        yield from families.values()
        enabled = GaugeMetricFamily(
            "scylla_table_autovacuum",
            "1 when autovacuum reclaims each table's dead rows; 0 when it is off for the "
            "server or for the table.",
            labels=["table"],
        )
        for table in report.tables:
            enabled.add_metric([table.table], int(table.table not in report.unvacuumed))
        yield enabled
        labels = ["kind", "pid", "application_name", "state"]
        age = GaugeMetricFamily(
            "scylla_vacuum_horizon_age_seconds",
            "How long the oldest transaction holding VACUUM back has been open (absent when "
            "nothing holds it, or a replication slot does), labelled with its session.",
            labels=labels,
        )
        behind = GaugeMetricFamily(
            "scylla_vacuum_horizon_transactions",
            "How many transaction ids old the horizon of the oldest holder is.",
            labels=labels,
        )
        oldest = report.oldest
        if oldest is not None:
            names = [oldest.kind, str(oldest.pid or ""), oldest.name, oldest.state]
            behind.add_metric(names, oldest.transactions)
            if oldest.age is not None:
                age.add_metric(names, max(oldest.age.total_seconds(), 0.0))
        yield age
        yield behind
        yield GaugeMetricFamily(
            "scylla_idle_in_transaction_sessions",
            "Sessions of the database idle in a transaction.",
            value=report.idle_count,
        )
        idle = GaugeMetricFamily(
            "scylla_idle_in_transaction_seconds",
            f"How long each session idle in a transaction (the longest {db.IDLE_SHOWN}) has "
            "been idle; holds_horizon is 1 when it holds VACUUM back.",
            labels=["pid", "application_name", "holds_horizon"],
        )
        for session in report.idle:
            idle.add_metric(
                [str(session.pid), session.name, str(int(session.holds_horizon))],
                max(session.idle.total_seconds(), 0.0),
            )
        yield idle


def registry(using: str = "default") -> CollectorRegistry:
    """A registry of every metric: this process's events (or, with PROMETHEUS_MULTIPROC_DIR,
    every process's), and the database gauges."""
    found = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(found)  # type: ignore[no-untyped-call]
    else:
        found.register(EVENTS)
    found.register(TaskMetricsCollector(using))
    return found


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition of every metric.

    It needs no login, like most metrics endpoints: serve it where only Prometheus can reach
    it, or wrap it (e.g. in `django.contrib.admin.views.decorators.staff_member_required`).
    With queues routed to several databases (`SCYLLA["QUEUE_DATABASES"]`), `?database=<alias>`
    reads that database's gauges (one scrape job per database); an unknown alias is a 404.
    """
    if request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
    using = request.GET.get("database", DEFAULT_DB_ALIAS)
    if using not in databases():
        return HttpResponse(
            _("No database holds tasks under the alias %(name)r.") % {"name": using} + "\n",
            status=404,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(generate_latest(registry(using)), content_type=CONTENT_TYPE_LATEST)
