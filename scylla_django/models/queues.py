"""QueueSetting: an operator's per-queue switches, paused and a limit on running tasks."""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import connections, models

from .. import db
from ..db import Now
from ..validation import (
    QUEUE_MAX_LENGTH,
    queue_validator,
    validate_queue,
)


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
        if db.uses_single_statement_transitions(connections[self.db]):
            db.postgresql_notify(self.db, db.READY_CHANNEL, [setting.queue])
        return setting

    def limit(self, queue: str, max_running: int | None) -> QueueSetting:
        """At most `max_running` tasks of `queue` run at once across all workers (None: no
        limit). Tasks already running above a new limit finish; no new one is leased until
        the queue is under it."""
        return self._set(queue, max_running=validate_max_running(max_running))

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


class QueueSetting(models.Model):
    """How a queue is leased: `paused` (no lease takes its tasks) and `max_running` (at most
    that many of its tasks run at once, across all workers; null: no limit)."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH, unique=True, validators=[queue_validator])
    paused = models.BooleanField(default=False)
    max_running = models.PositiveIntegerField(null=True, blank=True)
    updated = models.DateTimeField(db_default=Now())

    objects: ClassVar[QueueSettingQuerySet] = QueueSettingQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["queue"]
        permissions = [("control_queue", "Can pause, resume and limit queues")]

    def __str__(self) -> str:
        state = "paused" if self.paused else "active"
        limit = f", at most {self.max_running} running" if self.max_running else ""
        return f"{self.queue} ({state}{limit})"
