"""The dashboard's queue table: each queue's tasks per status, its longest wait, whether it is
paused or unserved, and their sum.

Counts per (queue, status) are one GROUP BY that PostgreSQL answers with an index-only scan of
`scylla_task_queue_status_idx` (about 60 ms at a million rows); the longest wait per queue reads
the leasable ready tasks only, through `scylla_task_ready_idx`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from ...durations import short
from ...enums import TERMINAL_STATUSES, Status
from ...models import SCHEDULED, QueueSetting, Task
from ...models.serving import live_worker_queues

STATUSES: tuple[Status, ...] = tuple(Status)
# The terminal statuses of `enums`, in the order the pages show them.
FINISHED: tuple[Status, ...] = tuple(s for s in Status if s in TERMINAL_STATUSES)


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
