"""What went wrong, as the dashboard lists it: leases that expired and the monitor has not reset
yet (`scylla_task_running_idx`), the latest aborted tasks, and the aborted tasks of the last 24
hours (at most `FAILURE_SCAN` of them, through `scylla_task_terminal_idx`) grouped by queue and
first error code."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Max
from django.db.models.fields.json import KT
from django.utils import timezone

from ...durations import ago
from ...enums import Status
from ...models import Task

LIST_LIMIT = 20
# Failures are grouped over this window, and over at most this many of its newest tasks.
FAILURE_WINDOW = timedelta(hours=24)
FAILURE_SCAN = 10_000


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
