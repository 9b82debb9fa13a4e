"""Events and the firings of triggered schedules.

An `Event` is something that happened (`partition.added` with its payload, or a task of a
queue that completed, aborted or was cancelled). A schedule with a trigger fires on events: a
`Firing` submits its task (through the schedule's run constraints) and records, as
`Consumption` rows, the events it consumed, so that no event fires the same schedule twice.
`Watermark` is how far the monitor has read History for task events. See
`scylla_django.schedules.events` and `scylla_django.schedules.triggers`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Q

from ..db import Now
from ..validation import RN_MAX_LENGTH

#: The longest event kind.
KIND_MAX_LENGTH = 200


class Event(models.Model):
    """Something that happened, of a `kind` (`partition.added`), with a JSON `payload`.

    Written in the transaction of whoever emitted it (`scylla_django.emit`), so an event of a
    rolled-back transaction never existed. A task event (`task.completed`, `task.aborted`,
    `task.cancelled`) is written from its History row (`history`, unique: one event per
    transition) with the payload `{"rn", "queue", "status", "spec", "result"}`.
    """

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=KIND_MAX_LENGTH)
    payload = models.JSONField(default=dict, blank=True)
    time = models.DateTimeField(db_default=Now())
    history = models.BigIntegerField(null=True, blank=True, unique=True, editable=False)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["kind", "id"], name="scylla_event_kind_idx")]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk}"

    def as_json(self) -> dict[str, Any]:
        """The JSON rendering: `{"id", "kind", "payload", "time"}`."""
        time = self.time.isoformat() if isinstance(self.time, datetime) else None
        return {"id": self.pk, "kind": self.kind, "payload": self.payload, "time": time}


class FiringOutcome(models.TextChoices):
    """What the run constraints of its schedule made of a trigger's firing."""

    SUBMITTED = "submitted", "Submitted"
    DELAYED = "delayed", "Waiting for its trigger's delay"
    WAITING = "waiting", "Waiting for its run constraints"
    MERGED = "merged", "Merged into the firing that waits"
    SKIPPED = "skipped", "Skipped (a run constraint was unmet)"


class Firing(models.Model):
    """One firing of a schedule's trigger: its task's rn, what the schedule's run constraints
    made of it (`outcome`: submitted, held as the schedule's waiting firing, merged into the one
    that waits, or skipped) and, through its `Consumption` rows, the events it consumed.

    A trigger with a `delay` fires `delayed`: the firing waits until `due`, then goes through
    the run constraints, its outcome written then (`due` stays, as a record). `spec` is the
    task's spec when the firing made it (the events of `with_events`); null, the schedule's.
    """

    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey("Schedule", on_delete=models.CASCADE, related_name="firings")
    rn = models.CharField(max_length=RN_MAX_LENGTH, unique=True)
    outcome = models.CharField(
        max_length=9, choices=FiringOutcome.choices, default=FiringOutcome.SUBMITTED
    )
    time = models.DateTimeField(db_default=Now())
    due = models.DateTimeField(null=True, blank=True)
    spec = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["schedule", "id"], name="scylla_firing_schedule_idx"),
            models.Index(
                fields=["due"], name="scylla_firing_delayed_idx", condition=Q(outcome="delayed")
            ),
        ]

    def __str__(self) -> str:
        return self.rn


class Consumption(models.Model):
    """An event a schedule's firing consumed: each event fires each schedule at most once."""

    id = models.BigAutoField(primary_key=True)
    firing = models.ForeignKey(Firing, on_delete=models.CASCADE, related_name="consumptions")
    schedule = models.ForeignKey("Schedule", on_delete=models.CASCADE, related_name="+")
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="consumptions")

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "event"], name="scylla_consumption_once_per_schedule"
            )
        ]
        indexes = [models.Index(fields=["event"], name="scylla_consumption_event_idx")]

    def __str__(self) -> str:
        return f"{self.event_id} by {self.firing_id}"


class Watermark(models.Model):
    """How far a reader has read a table: the History id up to which task events are written."""

    name = models.CharField(max_length=64, primary_key=True)
    position = models.BigIntegerField(default=0)
    updated = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.name} at {self.position}"
