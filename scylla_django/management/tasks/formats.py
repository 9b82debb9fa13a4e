"""How `manage.py scylla_tasks` (and `scylla_schedules`) write a task's fields and a refusal on
the terminal."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError

from ...durations import ago
from ...models import Task


def message(exc: Exception) -> str:
    """The words of a refusal or a validation error."""
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return str(exc)


def first_error(task: Task) -> str:
    """The code of the first error a task recorded, or ""."""
    errors = task.errors or []
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    return str(first.get("code", ""))


def when(moment: datetime | None, now: datetime) -> str:
    """A moment, in UTC to the second, and how long ago it was: `2026-01-02 10:00:00 (3 s ago)`."""
    if moment is None:
        return ""
    return f"{moment:%Y-%m-%d %H:%M:%S} ({ago(moment, now)})"
