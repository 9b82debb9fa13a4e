"""Traces: the W3C trace context (`traceparent`) of the span that submitted a task, kept beside
the task rather than on it (docs/howto/tracing.md).

A row per traced task, keyed by its rn, written in the transaction that inserts the task: no
lease, heartbeat or finish reads or rewrites it, so the task row that every transition
rewrites stays as narrow as before, and an untraced task costs nothing. The worker reads it
once per run, only when a tracer is configured; a retry gets a copy of the row of the task it
follows, so the chain keeps the trace of its first submission.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models

from ..validation import RN_MAX_LENGTH, TRACEPARENT_LENGTH


class TaskTrace(models.Model):
    """The `traceparent` of the span that submitted the task `rn`."""

    rn = models.CharField(max_length=RN_MAX_LENGTH, primary_key=True)
    traceparent = models.CharField(max_length=TRACEPARENT_LENGTH)

    class Meta:
        verbose_name = "task trace"

    def __str__(self) -> str:
        return f"{self.rn}: {self.traceparent}"

    @property
    def trace_id(self) -> str:
        """The trace id: the second field of the traceparent (32 hex digits)."""
        return trace_id_of(self.traceparent)


def trace_id_of(traceparent: str) -> str:
    """The trace id of a traceparent (`00-<trace id>-<span id>-<flags>`)."""
    return traceparent.split("-")[1]


def take_traceparent(values: dict[str, Any]) -> str | None:
    """Remove the traceparent from a new task's field values (`task_values`), and return it."""
    traceparent: str | None = values.pop("traceparent", None)
    return traceparent


def keep_traces(using: str, traces: Mapping[str, str]) -> None:
    """Write the traceparent of each new task of `traces` (rn → traceparent); a task that
    has one already keeps it."""
    if traces:
        TaskTrace.objects.using(using).bulk_create(
            [TaskTrace(rn=rn, traceparent=tp) for rn, tp in traces.items()],
            ignore_conflicts=True,
        )


def copy_trace(using: str, from_rn: str, to_rn: str) -> None:
    """Give the task `to_rn` the trace of the task `from_rn`, if it has one (a retry)."""
    traceparent = traceparent_of(using, from_rn)
    if traceparent is not None:
        keep_traces(using, {to_rn: traceparent})


def traceparent_of(using: str, rn: str) -> str | None:
    """The traceparent stored for the task `rn`, or None."""
    found: str | None = (
        TaskTrace.objects.using(using).filter(rn=rn).values_list("traceparent", flat=True).first()
    )
    return found


def traceparents_of(using: str, rns: list[str]) -> dict[str, str]:
    """The traceparents stored for the tasks `rns` (one query), by rn; a task without one is
    not in it."""
    return dict(TaskTrace.objects.using(using).filter(rn__in=rns).values_list("rn", "traceparent"))


def forget_traces(using: str, tasks: models.QuerySet[Any]) -> None:
    """Delete the traces of `tasks` (before the tasks themselves)."""
    TaskTrace.objects.using(using).filter(rn__in=tasks.order_by().values("rn")).delete()
