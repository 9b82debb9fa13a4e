"""The numbers behind the admin dashboard: plain functions returning dataclasses, one module per
part of the page.

| module | part |
|---|---|
| `queues` | the queue table: tasks per queue and status, the longest wait, paused queues |
| `finished` | the throughput chart: tasks finished per minute over the last hour |
| `failures` | expired leases, the latest failures, failures grouped by queue and error code |
| `workers` | the workers, their load and the tasks they hold; the live names the filters suggest |
| `tables` | VACUUM (PostgreSQL): dead rows, bloat, what holds VACUUM back, idle transactions |

Each function is one or two queries chosen to stay cheap on a table of millions of tasks; the
monitors' state (when the latest pass ended, whether any monitor still runs) is one more.
Ages and the chart's minutes are measured on this host's clock: they are for display only,
while the selections themselves (expired, ready) use the database clock like the monitor does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone

from ...durations import ago
from ...enums import Status
from ...models import Batch, Monitor, MonitorStatus, Task
from .failures import (
    FAILURE_SCAN,
    FAILURE_WINDOW,
    LIST_LIMIT,
    Failures,
    TaskList,
    TaskRow,
    expired_leases,
    failure_groups,
    recent_failures,
)
from .finished import CHART_HEIGHT, CHART_MINUTES, CHART_WIDTH, Throughput, throughput
from .queues import FINISHED, STATUSES, QueueRow, queue_table, totals
from .tables import Vacuum, vacuum
from .workers import (
    HELD_LIMIT,
    WORKER_LIMIT,
    WORKER_SILENCE,
    Workers,
    held_tasks,
    known_queues,
    known_workers,
    running_counts,
    worker_board,
    worker_silence,
)

__all__ = [
    "CHART_HEIGHT",
    "CHART_MINUTES",
    "CHART_WIDTH",
    "FAILURE_SCAN",
    "FAILURE_WINDOW",
    "FINISHED",
    "HELD_LIMIT",
    "LIST_LIMIT",
    "STATUSES",
    "WORKER_LIMIT",
    "WORKER_SILENCE",
    "Dashboard",
    "build",
    "expired_leases",
    "failure_groups",
    "held_tasks",
    "known_queues",
    "known_workers",
    "queue_table",
    "recent_failures",
    "running_counts",
    "throughput",
    "totals",
    "vacuum",
    "worker_board",
    "worker_silence",
]


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
