"""Where a task came from: who submitted it, and the trace it belongs to."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ...models import Task, TaskOrigin
from ...models.traces import trace_id_of, traceparent_of


@admin.display(description=gettext_lazy("submitted by"))
def submitter_text(task: Task) -> str:
    """Who submitted the task: a user (and the API token used), or the system."""
    origin = TaskOrigin.objects.filter(task=task).select_related("user").first()
    if origin is None or origin.kind == "system":
        return (origin.name if origin and origin.name else "") or _("the system")
    who = origin.user.get_username() if origin.user is not None else origin.kind
    if origin.name and origin.name != who:
        who = f"{origin.name} ({who})"
    if origin.token:
        who += " " + _("with API token %(token)s…") % {"token": origin.token[:8]}
    return who + (f": {origin.description}" if origin.description else "")


@admin.display(description=gettext_lazy("trace"))
def trace(task: Task) -> str:
    """The trace id of the span that submitted the task (its traceparent on hover)."""
    traceparent = traceparent_of(task._state.db or "default", task.rn)
    if traceparent is None:
        return "-"
    return format_html('<span title="{}">{}</span>', traceparent, trace_id_of(traceparent))
