"""Queue rollups: what each queue did per minute and per hour, counted once from History.

A rollup row holds one queue's completions, aborts and the waits of its first leases (from
submission, or `not_before` when later, to the start of the first lease) over one closed
minute or hour. The waits are kept as a histogram of fixed buckets, so that rows can be summed
and a median or 95th percentile estimated from any sum of them (exact percentiles cannot be
summed): a bucket spans a factor of 2^(1/8) (about 9%), from 1 ms up; waits under 1 ms share
the first bucket. An estimate interpolates, as `percentile_cont` does, between the two waits
ranked around the percentile, each placed within its bucket, so it differs from the exact
percentile by less than 9% (a factor of 2^(1/8)), or by less than 1 ms.

`QueueRollupQuerySet.roll_up()` counts the minutes that are settled (a minute after their
end) since the last one rolled up, one hour a transaction, and writes them by upsert on
(minutes, start, queue): running it again, or twice at once, writes the same figures.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import accumulate
from typing import Any, ClassVar

from django.db import models
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q
from django.db.models.functions import Coalesce, Greatest, TruncMinute
from django.utils import timezone

from .. import db
from ..conf import scylla_settings
from ..enums import EventType
from ..validation import QUEUE_MAX_LENGTH, validate_timeout
from .history import History

MINUTE = 1
HOUR = 60
SETTLED = timedelta(minutes=1)
"""A minute is settled this long after its end: a History row is stamped with its transaction's
start, so a row of a closed minute may still commit a little after it."""
BACKFILL = timedelta(days=7)
"""How far back the first roll-up reaches: the longest range of the dashboard's charts."""
WAIT_FLOOR = 0.001
"""The upper edge of the first wait bucket, in seconds."""
BUCKETS_PER_DOUBLING = 8
LAST_BUCKET = 40 * BUCKETS_PER_DOUBLING
"""Waits from 1 ms times 2^40 (about 35 years) up share the last bucket."""

MARK = ""
"""The queue of the row that marks how far the minutes are rolled up, quiet ones included: no
queue has this name."""

Waits = dict[int, int]
"""A histogram of waits: bucket number → how many waits fell in it."""


def first_lease() -> Q:
    """History's events that start a task's first lease (a task leased again, after a timeout
    or a yield, has lost the time it became ready again)."""
    return Q(typ=EventType.ASSIGNMENT, task__leases=1)


def wait_to_start() -> ExpressionWrapper[Any]:
    """On History's events: the time from the task's submission (or `not_before`, when later)
    to the event."""
    return ExpressionWrapper(
        F("time") - Greatest("task__created", Coalesce("task__not_before", "task__created")),
        output_field=DurationField(),
    )


def wait_bucket(seconds: float) -> int:
    """The histogram bucket of a wait of `seconds`: 0 below 1 ms, then one per 2^(1/8)."""
    if seconds < WAIT_FLOOR:
        return 0
    return min(1 + int(BUCKETS_PER_DOUBLING * math.log2(seconds / WAIT_FLOOR)), LAST_BUCKET)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """The waits, in seconds, that bucket `bucket` holds: from the first, up to the second."""
    if bucket == 0:
        return 0.0, WAIT_FLOOR
    return (
        WAIT_FLOOR * 2 ** ((bucket - 1) / BUCKETS_PER_DOUBLING),
        WAIT_FLOOR * 2 ** (bucket / BUCKETS_PER_DOUBLING),
    )


def estimate(waits: Mapping[int, int], fraction: float) -> float | None:
    """The `fraction` percentile of the waits counted in `waits`, in seconds (None: no wait).

    As `percentile_cont`: the waits ranked just below and above `fraction` * (n - 1),
    interpolated; each is placed in its bucket by its rank among the bucket's waits, taken as
    spread evenly over the bucket, so it is within the bucket's factor (2^(1/8)) of the wait it
    stands for, or within 1 ms, and so is the percentile.
    """
    return estimates(waits, (fraction,))[0]


def estimates(waits: Mapping[int, int], fractions: Sequence[float]) -> list[float | None]:
    """`estimate()` of each of `fractions`, the histogram read once."""
    ordered = sorted(waits.items())
    ends = list(accumulate(count for _, count in ordered))  # the rank after each bucket
    total = ends[-1] if ends else 0
    if not total:
        return [None] * len(fractions)

    def ranked(index: int) -> float:
        position = bisect_right(ends, index)
        bucket, count = ordered[position]
        low, high = bucket_bounds(bucket)
        return low + (high - low) * (index - (ends[position] - count) + 0.5) / count

    found: list[float | None] = []
    for fraction in fractions:
        rank = fraction * (total - 1)
        below = int(rank)
        above = min(below + 1, total - 1)
        found.append(ranked(below) + (ranked(above) - ranked(below)) * (rank - below))
    return found


@dataclass
class Tally:
    """What one queue did in one minute, hour or interval: completions, aborts, and the
    histogram of the waits of its first leases."""

    completed: int = 0
    aborted: int = 0
    waits: Waits = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        """Count `other` in this one."""
        self.completed += other.completed
        self.aborted += other.aborted
        for bucket, count in other.waits.items():
            self.waits[bucket] = self.waits.get(bucket, 0) + count

    def percentiles(self, *fractions: float) -> list[float | None]:
        """The estimated percentiles of the waits, in seconds, one per fraction (see
        `estimate()`)."""
        return estimates(self.waits, fractions)


Tallies = dict[tuple[datetime, str], Tally]
"""Tallies by (start of their minute, hour or interval, queue)."""


def tally_history(using: str, since: datetime, until: datetime | None = None) -> Tallies:
    """History's completions, aborts and first-lease waits from `since` (to `until`), per
    minute and queue: two queries over `scylla_history_typ_time_idx`, joined to the tasks."""
    events = History.objects.using(using).filter(
        typ__in=[EventType.ASSIGNMENT, EventType.COMPLETION, EventType.ABORT], time__gte=since
    )
    if until is not None:
        events = events.filter(time__lt=until)
    events = events.annotate(minute=TruncMinute("time"))
    found: Tallies = defaultdict(Tally)
    counts: Any = (
        events.filter(typ__in=[EventType.COMPLETION, EventType.ABORT])
        .values("minute", "task__queue")
        .annotate(
            completed=Count("pk", filter=Q(typ=EventType.COMPLETION)),
            aborted=Count("pk", filter=Q(typ=EventType.ABORT)),
        )
        .order_by()
    )
    for row in counts:
        tally = found[(row["minute"], row["task__queue"])]
        tally.completed, tally.aborted = row["completed"], row["aborted"]
    for minute, queue, wait in (
        events.filter(first_lease())
        .annotate(wait=wait_to_start())
        .values_list("minute", "task__queue", "wait")
    ):
        waits = found[(minute, queue)].waits
        bucket = wait_bucket(wait.total_seconds())
        waits[bucket] = waits.get(bucket, 0) + 1
    return dict(found)


def first_event(using: str, since: datetime, until: datetime) -> datetime | None:
    """The time of History's first completion, abort or lease from `since` to `until` (None:
    there is none): one index lookup per event type."""
    times = [
        History.objects.using(using)
        .filter(typ=typ, time__gte=since, time__lt=until)
        .order_by("time")
        .values_list("time", flat=True)
        .first()
        for typ in (EventType.ASSIGNMENT, EventType.COMPLETION, EventType.ABORT)
    ]
    return min((t for t in times if t is not None), default=None)


def hour_of(moment: datetime) -> datetime:
    """The start of the hour of `moment` in the default time zone (`TIME_ZONE`)."""
    local = timezone.localtime(moment, timezone.get_default_timezone())
    return local.replace(minute=0, second=0, microsecond=0)


def minute_of(moment: datetime) -> datetime:
    """The start of the minute of `moment`."""
    return moment.replace(second=0, microsecond=0)


class QueueRollupQuerySet(models.QuerySet["QueueRollup"]):
    """The set operations of the rollups: how far they reach, their tallies, the roll-up and
    the purge."""

    def rolled_until(self, minutes: int = MINUTE) -> datetime | None:
        """The end of the latest row of `minutes` (`MINUTE` or `HOUR`): every minute before
        it is rolled up (None: no such row). One index lookup.

        An hour is written with its minutes, and purged no later than they are, so there are
        hour rows only when there are minute rows; the hour rows may reach further (the
        quiet minutes at the end of an hour leave no minute row).
        """
        latest = (
            self.filter(minutes=minutes).order_by("-start").values_list("start", flat=True).first()
        )
        return None if latest is None else latest + timedelta(minutes=minutes)

    def tallies(self, minutes: int, since: datetime, until: datetime) -> Tallies:
        """The rows of `minutes` (`MINUTE` or `HOUR`) that start from `since` to `until`."""
        rows = (
            self.filter(minutes=minutes, start__gte=since, start__lt=until)
            .exclude(queue=MARK)
            .values_list("start", "queue", "completed", "aborted", "waits")
        )
        return {
            (start, queue): Tally(completed, aborted, {int(b): n for b, n in waits.items()})
            for start, queue, completed, aborted, waits in rows
        }

    def roll_up(self, until: datetime | None = None, budget: float | None = None) -> int:
        """Roll up History's settled minutes since the last one rolled up (at first, the last
        `BACKFILL`) to `until` (default: the database clock less `SETTLED`), one hour a
        transaction; an hour once all its minutes are settled. Returns the rows written.

        With a `budget` (seconds), no further hour is begun once it is spent: the next
        roll-up goes on from there (a first roll-up over a large History takes several).

        Each hour is counted from History as a whole once it is settled, its minutes again
        with it, so the figures written never depend on rows another roll-up is writing.
        """
        end = minute_of(until or db.read_clock(self.db) - SETTLED)
        ends = [self.rolled_until(MINUTE), self.rolled_until(HOUR)]
        start = max((e for e in ends if e is not None), default=end - BACKFILL)
        if start >= end:
            return 0
        written = 0
        found: Tallies = {}
        deadline = None if budget is None else time.monotonic() + budget
        while start < end:
            if not found and start == hour_of(start):  # skip whole hours without an event
                first = first_event(self.db, start, end)
                if first is None:
                    start = end
                    break
                start = max(start, hour_of(first))
            hour = hour_of(start)
            after = hour + timedelta(hours=1)
            settled = after <= end
            found = tally_history(self.db, hour if settled else start, after if settled else end)
            rows = [self._row(MINUTE, minute, queue, t) for (minute, queue), t in found.items()]
            if settled:
                hourly: dict[str, Tally] = defaultdict(Tally)
                for (_, queue), tally in found.items():
                    hourly[queue].add(tally)
                rows += [self._row(HOUR, hour, queue, t) for queue, t in hourly.items()]
            written += self._upsert(rows)
            start = after
            if deadline is not None and time.monotonic() > deadline:
                break
        self._mark(min(start, end) - timedelta(minutes=1))
        return written

    def purge(self, older_than: timedelta | None = None) -> int:
        """Delete the rows that start before `older_than` (default `SCYLLA['RETENTION']`) ago."""
        age = validate_timeout(scylla_settings.RETENTION if older_than is None else older_than)
        old = self.filter(minutes__in=[MINUTE, HOUR], start__lt=db.now_plus(-age))
        return old.delete()[0]

    def _row(self, minutes: int, start: datetime, queue: str, tally: Tally) -> QueueRollup:
        return self.model(
            minutes=minutes,
            start=start,
            queue=queue,
            completed=tally.completed,
            aborted=tally.aborted,
            waits={str(bucket): count for bucket, count in sorted(tally.waits.items())},
        )

    def _mark(self, minute: datetime) -> None:
        """Mark the minutes up to `minute` as rolled up, with one empty row of the queue
        `MARK` in place of the previous ones, so that quiet minutes are not read again."""
        with db.write_atomic(self.db):
            self.filter(minutes=MINUTE, queue=MARK, start__lt=minute).delete()
            self._upsert([self._row(MINUTE, minute, MARK, Tally())])

    def _upsert(self, rows: Iterable[QueueRollup]) -> int:
        # One order for every writer, so that two roll-ups at once never wait for each other
        # in a circle.
        ordered = sorted(rows, key=lambda r: (r.minutes, r.start, r.queue))
        if ordered:
            with db.write_atomic(self.db):
                db.upsert(
                    self.model,
                    ordered,
                    unique_fields=["minutes", "start", "queue"],
                    update_fields=["completed", "aborted", "waits"],
                    using=self.db,
                )
        return len(ordered)


class QueueRollup(models.Model):
    """One queue's completions, aborts and first-lease waits over one closed minute
    (`minutes` = 1) or hour (60), counted from History by `QueueRollup.objects.roll_up()`.

    `waits` is a histogram: bucket number (as a string, JSON's keys) → count; see
    `wait_bucket()` and `estimate()`.
    """

    id = models.BigAutoField(primary_key=True)
    start = models.DateTimeField()
    minutes = models.PositiveSmallIntegerField()
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH)
    completed = models.PositiveIntegerField(default=0)
    aborted = models.PositiveIntegerField(default=0)
    waits = models.JSONField(default=dict)

    MINUTE: ClassVar[int] = MINUTE
    HOUR: ClassVar[int] = HOUR

    objects: ClassVar[QueueRollupQuerySet] = QueueRollupQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "scylla_queue_rollup"
        constraints = [
            # The upsert's conflict target, and the charts' range reads by length and start.
            models.UniqueConstraint(
                fields=["minutes", "start", "queue"], name="scylla_queue_rollup_uniq"
            ),
            models.CheckConstraint(
                condition=Q(minutes__in=[MINUTE, HOUR]), name="scylla_queue_rollup_minutes"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.start:%Y-%m-%d %H:%M} +{self.minutes} min"
