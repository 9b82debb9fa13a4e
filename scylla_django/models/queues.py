"""Queues: an operator's switches per queue (`QueueSetting`: paused, a limit on running
tasks, a cap on ready tasks), and what each queue holds (`queue_summaries`, `ready_summary`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import ExpressionWrapper, F, Min, Q
from django.db.models.functions import Coalesce, Greatest

from .. import db
from ..db import Now, due
from ..enums import Status
from ..text import DurationError, positive_duration
from ..validation import (
    QUEUE_MAX_LENGTH,
    key_name,
    queue_validator,
    validate_queue,
)

#: What a submission does when its queue (or admission key) is full: refuse it (QueueFull),
#: cancel the oldest ready task to make room, or (a Python caller's choice) wait for room.
REJECT = "reject"
SHED_OLDEST = "shed_oldest"
WAIT = "wait"
ON_FULL = (REJECT, SHED_OLDEST, WAIT)
#: What a queue's setting may say (waiting is a caller's choice, not an operator's).
QUEUE_ON_FULL = (REJECT, SHED_OLDEST)


def validate_max_ready(value: object) -> int | None:
    """A cap on ready tasks: None, or an integer from 1 to 100,000,000."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000_000:
        raise ValidationError(
            "max_ready must be an integer from 1 to 100000000, or null for no cap.",
            code="invalid_max_ready",
        )
    return value


def validate_on_full(value: object, allowed: tuple[str, ...] = ON_FULL) -> str:
    """What a full queue does with a submission: one of `allowed`."""
    if value not in allowed:
        raise ValidationError(f"on_full is one of {', '.join(allowed)}.", code="invalid_on_full")
    return str(value)


class QueueSettingQuerySet(models.QuerySet["QueueSetting"]):
    """Operators' settings per queue: paused, and a limit on its running tasks.

    A queue without a row is neither paused nor limited. Leasing reads these rows in its own
    statement (`TaskQuerySet.lease`), so a change applies to the next lease of every worker.
    """

    def pause(self, queue: str) -> QueueSetting:
        """Stop leasing from `queue` (its tasks still go in; running ones carry on)."""
        return self._set(queue, paused=True)

    def resume(self, queue: str) -> QueueSetting:
        """Lease from `queue` again, and wake the workers that listen for it."""
        setting = self._set(queue, paused=False)
        db.notify_ready(self.db, [setting.queue])
        return setting

    def limit(self, queue: str, max_running: int | None) -> QueueSetting:
        """At most `max_running` tasks of `queue` run at once across all workers (None: no
        limit). Tasks already running above a new limit finish; no new one is leased until
        the queue is under it."""
        return self._set(queue, max_running=validate_max_running(max_running))

    def share(
        self, queue: str, fair_key: str | None, weights: dict[str, float] | None = None
    ) -> QueueSetting:
        """Share `queue`'s capacity fairly across the values of key family `fair_key`
        ("tenant"; None: no longer): within a priority, the lease takes the tasks of its
        values in turn, each value's `weights` times as often as a value of weight 1 (the
        default), instead of the oldest first (`db.fairness`). Applies to tasks submitted
        from now on; tasks already ready keep their place."""
        family = None if fair_key is None else key_name(fair_key, "fair_key")
        checked = validate_fair_weights(weights)
        if family is None and checked is not None:
            raise ValidationError("fair_weights needs a fair_key.", code="invalid_fair_weights")
        return self._set(queue, fair_key=family, fair_weights=checked)

    def age(self, queue: str, every: timedelta | float | str | None) -> QueueSetting:
        """Raise the priority of `queue`'s ready tasks by one for each `every` they wait
        (None: no longer), up to the highest (255), so that a low priority is never starved:
        the monitor's `PriorityAging` does it (`age_ready`)."""
        step = None if every is None else validate_aging(every)
        return self._set(queue, aging=step)

    def cap(self, queue: str, max_ready: int | None, on_full: str = REJECT) -> QueueSetting:
        """At most `max_ready` tasks of `queue` wait ready at once (None: no cap). A
        submission that finds the queue full does what `on_full` says: "reject" (QueueFull)
        or "shed_oldest" (the oldest ready task is cancelled with code `shed`); a caller may
        say otherwise for its own submission. Tasks already ready above a new cap stay."""
        return self._set(
            queue,
            max_ready=validate_max_ready(max_ready),
            on_full=validate_on_full(on_full, QUEUE_ON_FULL),
        )

    def _set(self, queue: str, **values: Any) -> QueueSetting:
        name = validate_queue(queue)
        with db.write_atomic(self.db):
            setting, _ = self.update_or_create(queue=name, defaults={**values, "updated": Now()})
        setting.refresh_from_db(fields=["updated"])
        return setting

    def of(self, queue: str) -> QueueSetting:
        """The settings of `queue`: its row, or an unsaved default one (neither paused nor
        limited)."""
        name = validate_queue(queue)
        return self.filter(queue=name).first() or self.model(queue=name)


def validate_max_running(value: object) -> int | None:
    """A per-queue limit on running tasks: None, or an integer from 1 to 1,000,000."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise ValidationError(
            "max_running must be an integer from 1 to 1000000, or null for no limit.",
            code="invalid_max_running",
        )
    return value


#: The largest weight of a fair share (`QueueSetting.fair_weights`).
MAX_FAIR_WEIGHT = 1000.0


def validate_fair_weights(value: object) -> dict[str, float] | None:
    """The weights of a fair share by key value: None, or a dict of positive numbers up to
    MAX_FAIR_WEIGHT by value (text)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str)
        and k
        and not isinstance(w, bool)
        and isinstance(w, (int, float))
        and 0 < w <= MAX_FAIR_WEIGHT
        for k, w in value.items()
    ):
        raise ValidationError(
            f"fair_weights is an object of weights (numbers above 0, at most "
            f"{MAX_FAIR_WEIGHT:g}) by key value.",
            code="invalid_fair_weights",
        )
    return {k: float(w) for k, w in value.items()}


class QueueSetting(models.Model):
    """How a queue is leased: `paused` (no lease takes its tasks) and `max_running` (at most
    that many of its tasks run at once, across all workers; null: no limit); `fair_key`, the
    key family whose values share its capacity fairly (null: oldest first within a priority),
    with `fair_weights`, a weight by value (1 for a value not named); `aging`, the wait that
    raises a ready task's priority by one (null: none); and how it admits tasks: `max_ready`
    (at most that many wait ready; null: no cap) and `on_full` (what a submission does when
    it is full, see `models.admission`)."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH, unique=True, validators=[queue_validator])
    paused = models.BooleanField(default=False)
    max_running = models.PositiveIntegerField(null=True, blank=True)
    fair_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    fair_weights = models.JSONField(null=True, blank=True)
    aging = models.DurationField(null=True, blank=True)
    max_ready = models.PositiveIntegerField(null=True, blank=True)
    on_full = models.CharField(
        max_length=16, choices=[(v, v) for v in QUEUE_ON_FULL], default=REJECT
    )
    updated = models.DateTimeField(db_default=Now())

    objects: ClassVar[QueueSettingQuerySet] = QueueSettingQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["queue"]
        permissions = [("control_queue", "Can pause, resume and limit queues")]

    def __str__(self) -> str:
        state = "paused" if self.paused else "active"
        limit = f", at most {self.max_running} running" if self.max_running else ""
        cap = f", at most {self.max_ready} ready ({self.on_full})" if self.max_ready else ""
        return f"{self.queue} ({state}{limit}{cap})"


def validate_aging(value: object) -> timedelta:
    """A queue's aging step: a duration of at least a second (a timedelta, seconds, "5m")."""
    try:
        step = positive_duration(value)
    except DurationError:
        step = None
    if step is None or step < timedelta(seconds=1):
        raise ValidationError(
            'aging is a duration of at least a second ("30s", "5m", seconds).',
            code="invalid_aging",
        )
    return step


#: The highest priority (the task table's check).
TOP_PRIORITY = 255


def age_ready(tasks: models.QuerySet[Any], chunk_size: int = 5000) -> int:
    """Raise by one the priority of each ready task of a queue with `aging` that has waited
    that long since it was submitted or last raised (its `updated`), up to TOP_PRIORITY;
    the number raised. Chunks of `chunk_size`, each one conditional UPDATE on the database
    clock, fenced on the task still being ready and unchanged since it was read."""
    using = tasks.db
    raised = 0
    steps = QueueSetting.objects.using(using).filter(aging__isnull=False)
    for queue, step in steps.values_list("queue", "aging"):
        waited = tasks.filter(
            status=Status.READY,
            queue=queue,
            priority__lt=TOP_PRIORITY,
            updated__lte=ExpressionWrapper(Now() - step, output_field=models.DateTimeField()),
        )
        while pks := list(waited.order_by().values_list("pk", flat=True)[:chunk_size]):
            raised += waited.filter(pk__in=pks).update(priority=F("priority") + 1, updated=Now())
    return raised


def _waiting_since() -> Greatest:
    """When a ready task became leasable: `created`, or its `not_before` if later."""
    return Greatest("created", Coalesce("not_before", "created"))


SCHEDULED = "scheduled"


@dataclass(frozen=True)
class QueueSummary:
    """One queue, as `Task.objects.queue_summaries()` sees it.

    `counts` has every status and `scheduled`: `ready` counts the leasable tasks only, and
    `scheduled` the ready tasks whose `not_before` is still ahead. `waiting_since` is when the
    longest-waiting leasable task became leasable (`created`, or its `not_before` if later),
    and `waited` how long ago that was on the database clock; both None if none is leasable.
    """

    queue: str
    counts: dict[str, int]
    waiting_since: datetime | None
    waited: timedelta | None


def queue_summaries(tasks: models.QuerySet[Any]) -> list[QueueSummary]:
    """Every queue of `tasks` that has tasks, by name: see `QueueSummary`.

    Two GROUP BY queries: counts per (queue, status), which the queue/status index answers
    alone, and the scheduled count and longest wait over the ready tasks.
    """
    counts: dict[str, dict[str, int]] = {}

    def row(queue: str) -> dict[str, int]:
        return counts.setdefault(queue, dict.fromkeys([*Status.values, SCHEDULED], 0))

    # COUNT(*), not COUNT(id): the queue/status index then answers without reading the table.
    for queue, status, n in (
        tasks.order_by().values_list("queue", "status").annotate(n=models.Count("*"))
    ):
        # Ready tasks are counted below, split into leasable and scheduled.
        row(queue)[status] = 0 if status == Status.READY else n
    leasable = due()
    since = models.Min(_waiting_since(), filter=leasable)
    ready = (
        tasks.filter(status=Status.READY)
        .order_by()
        .values("queue")
        .annotate(
            leasable=models.Count("id", filter=leasable),
            scheduled=models.Count("id", filter=Q(not_before__gt=Now())),
            since=since,
            waited=models.ExpressionWrapper(Now() - since, output_field=models.DurationField()),
        )
    )
    waits: dict[str, tuple[datetime | None, timedelta | None]] = {}
    for found in ready:  # its own snapshot: ready and scheduled always add up
        row(found["queue"]).update(
            {Status.READY.value: found["leasable"], SCHEDULED: found["scheduled"]}
        )
        waits[found["queue"]] = (found["since"], found["waited"])
    return [
        QueueSummary(queue, counts[queue], *waits.get(queue, (None, None)))
        for queue in sorted(counts)
    ]


def ready_summary(tasks: models.QuerySet[Any]) -> dict[str, tuple[int, timedelta | None]]:
    """Per queue with ready tasks: how many, and how long the oldest leasable one has
    waited (since it was created, or since its `not_before` if later; None while every
    ready task still waits for its `not_before`). One query over the ready-task index,
    on the database clock."""
    leasable = due()
    waiting_since = _waiting_since()
    rows = (
        tasks.filter(status=Status.READY)
        .order_by()
        .values("queue")
        .annotate(
            n=models.Count("*"),
            age=models.ExpressionWrapper(
                Now() - Min(waiting_since, filter=leasable),
                output_field=models.DurationField(),
            ),
        )
        .values_list("queue", "n", "age")
    )
    return {
        queue: (count, max(age, timedelta(0)) if age is not None else None)
        for queue, count, age in rows
    }
