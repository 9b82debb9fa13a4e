"""Schedule: a recurring submission, by cron expression or fixed interval."""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from django.db.models import Q, Subquery, Value
from django.db.models.functions import Coalesce

from ..db import Now
from ..validation import (
    QUEUE_MAX_LENGTH,
    RN_MAX_LENGTH,
    queue_validator,
    schedule_name_validator,
)
from .events import Event

#: What `Schedule._stored_trigger` holds when the trigger was not read from the database.
_UNREAD = object()


class CatchUp(models.TextChoices):
    """What a schedule submits for the ticks it missed while no monitor ran."""

    ONE = "one", "The latest missed tick only"
    ALL = "all", "Every missed tick"
    NONE = "none", "No missed tick"


class WhenUnmet(models.TextChoices):
    """What a firing does when a run constraint of its schedule is unmet."""

    WAIT = "wait", "Wait until the constraints are met"
    SKIP = "skip", "Skip the firing"


class OnTimeout(models.TextChoices):
    """What a firing that waited `wait_timeout` does."""

    CANCEL = "cancel", "Cancel the firing"
    FORCE = "force", "Run anyway"


class Schedule(models.Model):
    """A recurring submission: a task every `cron` tick (in `timezone`), every `every`, or at
    every firing of its `trigger` (on events; its rn `schedule:<name>:e<first event id>`).

    Each tick's task has the rn `schedule:<name>:<tick in UTC>`, so any number of monitors
    submit it exactly once. Schedules come from `SCYLLA["SCHEDULES"]` (`from_settings`) or are
    created in the admin or over the API. See `scylla_django.schedules`.

    A trigger counts the events after its watermark (`counts_after`, the newest event's id,
    and `counts_from`, the database time), which `save()` sets in the same statement when it
    writes a new trigger: at the schedule's creation and at each change of its trigger, not at
    other changes (`queue`, `enabled`, ...). Null: every unconsumed event counts (a schedule
    from before watermarks, or one written around `save()`, such as by `bulk_create`).
    """

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=100, unique=True, validators=[schedule_name_validator])
    cron = models.CharField(max_length=200, blank=True)
    every = models.DurationField(null=True, blank=True)
    # A trigger instead of cron/every: fires on events (see `scylla_django.schedules.triggers`).
    trigger = models.JSONField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH, validators=[queue_validator])
    spec = models.JSONField(default=dict, blank=True)
    priority = models.PositiveSmallIntegerField(default=0)
    enabled = models.BooleanField(default=True)
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.ONE)
    skip_if_running = models.BooleanField(default=False)
    # Run constraints (see scylla_django.schedules.constraints).
    window = models.JSONField(default=list, blank=True)
    min_gap = models.DurationField(null=True, blank=True)
    max_runs = models.CharField(max_length=20, blank=True)
    max_concurrent = models.PositiveIntegerField(null=True, blank=True)
    max_load = models.FloatField(null=True, blank=True)
    when_unmet = models.CharField(max_length=4, choices=WhenUnmet.choices, default=WhenUnmet.WAIT)
    wait_timeout = models.DurationField(null=True, blank=True)
    on_timeout = models.CharField(max_length=6, choices=OnTimeout.choices, default=OnTimeout.CANCEL)
    # What the constraints remember: rns that may still be ready or running (max_concurrent),
    # and the launch times within the max_runs period (ISO text).
    active = models.JSONField(default=list, blank=True, editable=False)
    launches = models.JSONField(default=list, blank=True, editable=False)
    from_settings = models.BooleanField(default=False, editable=False)
    next_run = models.DateTimeField(null=True, blank=True, editable=False)
    last_run = models.DateTimeField(null=True, blank=True, editable=False)
    last_task = models.CharField(  # noqa: DJ001
        max_length=RN_MAX_LENGTH, null=True, blank=True, editable=False
    )
    # A trigger's watermark (see the class).
    counts_after = models.BigIntegerField(null=True, blank=True, editable=False)
    counts_from = models.DateTimeField(null=True, blank=True, editable=False)
    created = models.DateTimeField(db_default=Now(), editable=False)
    updated = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        ordering = ["name"]
        indexes = [
            models.Index(
                fields=["next_run"], name="scylla_schedule_due_idx", condition=Q(enabled=True)
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=(Q(every__isnull=True) & ~Q(cron="") & Q(trigger__isnull=True))
                | (Q(every__isnull=False) & Q(cron="") & Q(trigger__isnull=True))
                | (Q(every__isnull=True) & Q(cron="") & Q(trigger__isnull=False)),
                name="scylla_schedule_cron_every_or_trigger",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=0, priority__lte=255),
                name="scylla_schedule_priority_range",
            ),
        ]

    #: The trigger as read from the database (canonical JSON), to tell a changed one.
    _stored_trigger: Any = _UNREAD

    def __str__(self) -> str:
        return self.name

    def save(self, **kwargs: Any) -> None:
        """Save; a new trigger (a new schedule's, or a changed one) also moves the watermark to
        now, in the same INSERT or UPDATE."""
        fields = kwargs.get("update_fields")
        written = fields is None or "trigger" in fields
        stored = self._stored_trigger
        moved = (
            written
            and self.trigger is not None
            and (self._state.adding or stored is _UNREAD or stored != _trigger_text(self.trigger))
        )
        if moved:
            self.counts_after, self.counts_from = watermark()
            if fields is not None:
                kwargs["update_fields"] = [*fields, "counts_after", "counts_from"]
        super().save(**kwargs)
        if moved:
            self.refresh_from_db(fields=["counts_after", "counts_from"])
        if written:
            self._stored_trigger = _trigger_text(self.trigger)

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any, **kwargs: Any) -> Schedule:
        instance = super().from_db(db, field_names, values, **kwargs)
        instance._stored_trigger = _trigger_text(instance.__dict__.get("trigger", _UNREAD))
        return instance


def watermark() -> tuple[Any, Any]:
    """The expressions of a watermark set now: the newest event's id (0 without events) and
    the database clock."""
    newest = Subquery(Event.objects.order_by("-id").values("id")[:1])
    return Coalesce(newest, Value(0)), Now()


def _trigger_text(trigger: Any) -> Any:
    """A trigger as canonical JSON text, to tell a changed trigger (`_UNREAD` as it is)."""
    return trigger if trigger is _UNREAD else json.dumps(trigger, sort_keys=True)
