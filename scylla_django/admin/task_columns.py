"""The task list's columns: each a function of one task, as `TaskAdmin.list_display` names it.

The admin names a column after its function (`column-<name>`, `field-<name>`), so each function
keeps the name its column has always had. Django's admin takes functions beside names in
`list_display`; django-stubs types it as names only, hence `COLUMNS: Any`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import followups
from ..durations import ago as ago_words
from ..models import Task
from . import display
from .display import ago, changelist_url, shown_field, timestamp


def action_checkbox(task: Task) -> SafeString:
    """Django's selection checkbox, written out directly: rendering its widget's template on
    each of the list's rows took a fifth of the page's time."""
    label = format_html(_("Select this object for an action - {}"), str(task))
    return format_html(
        '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
        helpers.ACTION_CHECKBOX_NAME,
        task.pk,
        label,
    )


@admin.display(description=gettext_lazy("queue"))
def queue_link(task: Task) -> SafeString:
    return format_html('<a href="{}">{}</a>', changelist_url(queue=task.queue), task.queue)


@admin.display(description=gettext_lazy("status"))
def status_badge(task: Task) -> SafeString:
    """The task's status as a badge; a follow-up's says that it waits for its parents."""
    badge = display.status_badge(task.status)
    if followups.waits_for_parents(task):
        return format_html('{} <span class="scylla-age">waiting for parents</span>', badge)
    return badge


@admin.display(description=gettext_lazy("progress"))
def progress_bar(task: Task) -> SafeString:
    return format_html(
        '<progress class="scylla-progress" value="{}" max="1">{}%</progress> '
        '<span class="scylla-age">{}%</span>',
        f"{task.progress:.3f}",
        round(task.progress * 100),
        round(task.progress * 100),
    )


@admin.display(description=gettext_lazy("owner"))
def owner_link(task: Task) -> SafeString | str:
    if not task.owner:
        return "-"
    return format_html('<a href="{}">{}</a>', changelist_url(owner=task.owner), task.owner)


@admin.display(description=gettext_lazy("error"))
def error_code(task: Task) -> SafeString | str:
    """The code of the task's first error, which the list's query extracts (`TaskChangeList`)."""
    code = getattr(task, "error_code", None)
    if not code:
        return "-"
    return format_html('<a href="{}"><code>{}</code></a>', changelist_url(error_code=code), code)


@admin.display(description=gettext_lazy("deadline"))
def deadline_at(task: Task) -> SafeString | str:
    if task.is_expired and task.deadline is not None:
        return format_html(
            '<span class="scylla-badge scylla-expired" title="{}, {}">expired</span>',
            timestamp(task.deadline),
            ago_words(task.deadline),
        )
    return ago(task.deadline)


created_at = shown_field("created_at", "created", ago, ordering="id")
updated_at = shown_field("updated_at", "updated", ago)


COLUMNS: Any = (
    "rn",
    queue_link,
    status_badge,
    "priority",
    progress_bar,
    owner_link,
    "leases",
    created_at,
    updated_at,
    deadline_at,
    error_code,
)
"""The list's columns, in order."""

# Only columns a full index can serve: rn (unique) and created, sorted by the primary key (the
# insertion order). The other indexes are partial (ready, running or terminal tasks only) or
# lead with another column, so sorting a million rows by them is a full sort.
SORTABLE: Any = ("rn", created_at)
"""The columns the list sorts by."""
