"""Schedule: a recurring submission, by cron expression or fixed interval."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ..db import Now
from ..validation import (
    QUEUE_MAX_LENGTH,
    RN_MAX_LENGTH,
    queue_validator,
    schedule_name_validator,
)


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
    every firing of its `trigger` (on events; its rn `schedule:<name>:trigger-<digest>`).

    Each tick's task has the rn `schedule:<name>:<tick in UTC>`, so any number of monitors
    submit it exactly once. Schedules come from `SCYLLA["SCHEDULES"]` (`from_settings`) or are
    created in the admin or over the API. See `scylla_django.schedules`.
    """

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=100, unique=True, validators=[schedule_name_validator])
    cron = models.CharField(max_length=200, blank=True)
    every = models.DurationField(null=True, blank=True)
    # A trigger instead of cron/every: fires on events (see `scylla_django.triggers`).
    trigger = models.JSONField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH, validators=[queue_validator])
    spec = models.JSONField(default=dict, blank=True)
    priority = models.PositiveSmallIntegerField(default=0)
    enabled = models.BooleanField(default=True)
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.ONE)
    skip_if_running = models.BooleanField(default=False)
    # Run constraints (see scylla_django.constraints).
    window = models.JSONField(default=list, blank=True)
    min_gap = models.DurationField(null=True, blank=True)
    max_runs = models.CharField(max_length=20, blank=True)
    max_concurrent = models.PositiveIntegerField(null=True, blank=True)
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

    def __str__(self) -> str:
        return self.name
