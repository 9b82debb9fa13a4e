"""WaitingRun: a schedule's firing held back until its run constraints are met."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ..db import Now
from ..validation import RN_MAX_LENGTH
from .schedules import Schedule


class WaitingRun(models.Model):
    """A firing of `schedule` (a tick or a trigger) that waits for its run constraints.

    One row per schedule at most (a later firing while one waits is counted in `merged`,
    not queued), and `rn` is the task the firing submits once released: rows survive monitor
    restarts, and the schedule row's lock plus the unique rn make a release happen once however
    many monitors run. The monitor looks at a row again at `recheck` (the soonest a constraint
    can change, e.g. the window's opening) and gives up at `deadline` (`wait_timeout`), then
    cancels or forces the run as `on_timeout` says. See `scylla_django.schedules.constraints`.
    """

    id = models.BigAutoField(primary_key=True)
    schedule = models.OneToOneField(
        Schedule, on_delete=models.CASCADE, related_name="waiting", db_constraint=True
    )
    rn = models.CharField(max_length=RN_MAX_LENGTH, unique=True)
    fired = models.DateTimeField(help_text="The tick or firing time.")
    spec = models.JSONField(null=True, blank=True, help_text="null: the schedule's spec.")
    since = models.DateTimeField(help_text="When the firing began to wait (schedules' clock).")
    deadline = models.DateTimeField(null=True, blank=True)
    recheck = models.DateTimeField()
    reason = models.TextField(blank=True)
    code = models.CharField(max_length=32, blank=True)
    merged = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        indexes = [models.Index(fields=["recheck"], name="scylla_waiting_recheck_idx")]
        constraints = [
            models.CheckConstraint(
                condition=Q(deadline__isnull=True) | Q(deadline__gte=models.F("since")),
                name="scylla_waiting_deadline_after_since",
            )
        ]

    def __str__(self) -> str:
        return self.rn
