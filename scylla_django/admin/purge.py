"""The bulk purge: its form, and a purge run within a time budget."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy

from ..conf import scylla_settings
from ..text import plural
from ..validation import QUEUE_MAX_LENGTH, queue_validator
from .dashboard.queues import FINISHED


class PurgeForm(forms.Form):
    """The bulk purge: terminal tasks not updated for N days, by status and optionally queue."""

    older_than_days = forms.IntegerField(
        label=gettext_lazy("Not updated for (days)"),
        min_value=1,
        max_value=36_500,
        help_text=gettext_lazy("Tasks whose last change is older than this many days."),
    )
    statuses = forms.MultipleChoiceField(
        choices=[(s.value, s.label) for s in FINISHED],
        widget=forms.CheckboxSelectMultiple,
        help_text=gettext_lazy(
            "Only terminal tasks can be purged; ready and running tasks never are."
        ),
    )
    queue = forms.CharField(
        required=False,
        max_length=QUEUE_MAX_LENGTH,
        validators=[queue_validator],
        help_text=gettext_lazy("One queue by its exact name, or empty for every queue."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault(
            "initial",
            {
                "older_than_days": max(1, scylla_settings.RETENTION.days),
                "statuses": [s.value for s in FINISHED],
            },
        )
        super().__init__(*args, **kwargs)

    def description(self) -> str:
        """The selection in words: "completed or aborted, not updated for 10 days, any queue"."""
        statuses = " or ".join(self.cleaned_data["statuses"])
        days = self.cleaned_data["older_than_days"]
        queue = self.cleaned_data["queue"]
        where = f"queue {queue}" if queue else "any queue"
        return f"{statuses}, not updated for {plural(days, 'day')}, {where}"

    def selection(self) -> dict[str, Any]:
        """The arguments of `purgeable()` and `purge()` (the form must be valid)."""
        return {
            "older_than": timedelta(days=self.cleaned_data["older_than_days"]),
            "statuses": self.cleaned_data["statuses"],
            "queue": self.cleaned_data["queue"] or None,
        }


class _OutOfTime(Exception):
    """Raised from a purge's `on_chunk` to stop it between two committed chunks."""


class TimedPurge:
    """Runs a chunked purge until it is done or `budget` has passed, counting what it deleted."""

    def __init__(self, budget: timedelta) -> None:
        self.budget = budget
        self.deleted = 0
        self.chunks = 0
        self.started = time.monotonic()

    def on_chunk(self, count: int) -> None:
        """`purge()`'s callback, after each committed chunk: count it, stop when out of time."""
        self.deleted += count
        self.chunks += 1
        if time.monotonic() - self.started >= self.budget.total_seconds():
            raise _OutOfTime

    def run(self, purge: Callable[..., int]) -> bool:
        """Call `purge(on_chunk=…)`; True if it finished, False if it was stopped."""
        try:
            purge(on_chunk=self.on_chunk)
        except _OutOfTime:
            return False
        return True

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started
