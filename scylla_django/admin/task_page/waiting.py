"""Why a ready task is not running now, and when it is expected to start."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ...models import Task


@admin.display(description=gettext_lazy("waiting"))
def waiting_line(task: Task) -> SafeString | str:
    """Why a ready task is not running now (`Task.waiting_reasons`), one reason a line."""
    reasons = task.waiting_reasons()
    if not reasons:
        return "-" if task.status != "ready" else "nothing: it may run now"
    return format_html(
        '<ul class="scylla-waiting">{}</ul>',
        format_html_join("", "<li>{}</li>", ((reason["detail"],) for reason in reasons)),
    )


@admin.display(description=gettext_lazy("starts"))
def starts_line(task: Task) -> str:
    """When a ready task is expected to start, and the rule that decides it (`Task.forecast`)."""
    if task.status != "ready":
        return "-"
    forecast = task.forecast()
    if forecast.starts_at is None:
        return _("unknown: %(why)s") % {"why": forecast.detail}
    if not forecast.wait:
        return _("may start now")
    return f"{forecast.starts_at:%Y-%m-%d %H:%M:%S} UTC ({forecast.detail})"
