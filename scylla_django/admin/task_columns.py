"""The task's columns and fields as the list and the page show them: badges, links, times."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import followups
from ..durations import ago as ago_words
from ..durations import short
from ..models import HELD, Dependency, History, Task
from ..text import plural
from .display import (
    TaskAdminBase,
    ago,
    changelist_url,
    moment,
    status_badge,
    timestamp,
)
from .schedules import chain as chain_links

HISTORY_LIMIT = 200
PARENTS_LIMIT = 100


def parent_item(parent: followups.Parent) -> SafeString:
    """A parent of a follow-up: a link to its page and its status; "purged" once it is gone."""
    if parent.status is None:
        return format_html('<li>{} <span class="scylla-age">purged</span></li>', parent.rn)
    url = reverse("admin:scylla_django_task_change", args=[parent.id])
    return format_html(
        '<li><a href="{}">{}</a> {}</li>', url, parent.rn, status_badge(parent.status)
    )


class TaskColumns(TaskAdminBase):
    """The task's columns and fields as the list and the page show them: badges, links, times. A
    part of `TaskAdmin`."""

    @admin.display(description=gettext_lazy("queue"))
    def queue_link(self, task: Task) -> SafeString:
        return format_html('<a href="{}">{}</a>', changelist_url(queue=task.queue), task.queue)

    @admin.display(description=gettext_lazy("status"))
    def status_badge(self, task: Task) -> SafeString:
        if followups.waits_for_parents(task):
            return format_html(
                '{} <span class="scylla-age">waiting for parents</span>', status_badge(task.status)
            )
        return status_badge(task.status)

    @admin.display(description=gettext_lazy("progress"))
    def progress_bar(self, task: Task) -> SafeString:
        return format_html(
            '<progress class="scylla-progress" value="{}" max="1">{}%</progress> '
            '<span class="scylla-age">{}%</span>',
            f"{task.progress:.3f}",
            round(task.progress * 100),
            round(task.progress * 100),
        )

    @admin.display(description=gettext_lazy("attempts in the chain"))
    def chain(self, task: Task) -> SafeString | str:
        return chain_links(task)

    @admin.display(description=gettext_lazy("unique key"))
    def unique_key_link(self, task: Task) -> SafeString | str:
        if task.unique_key is None:
            return "-"
        held = "held" if task.unique_held or not task.is_terminal else "free"
        return format_html(
            '<a href="{}"><code>{}</code></a> ({})',
            changelist_url(unique_key=task.unique_key),
            task.unique_key,
            held,
        )

    @admin.display(description=gettext_lazy("unique window"))
    def unique_window_text(self, task: Task) -> str:
        return "-" if task.unique_window is None else short(task.unique_window)

    @admin.display(description=gettext_lazy("owner"))
    def owner_link(self, task: Task) -> SafeString | str:
        if not task.owner:
            return "-"
        return format_html('<a href="{}">{}</a>', changelist_url(owner=task.owner), task.owner)

    @admin.display(description=gettext_lazy("error"))
    def error_code(self, task: Task) -> SafeString | str:
        code = getattr(task, "error_code", None)
        if not code:
            return "-"
        return format_html(
            '<a href="{}"><code>{}</code></a>', changelist_url(error_code=code), code
        )

    @admin.display(description=gettext_lazy("deadline"))
    def deadline_at(self, task: Task) -> SafeString | str:
        if task.is_expired and task.deadline is not None:
            return format_html(
                '<span class="scylla-badge scylla-expired" title="{}, {}">expired</span>',
                timestamp(task.deadline),
                ago_words(task.deadline),
            )
        return ago(task.deadline)

    @admin.display(description=gettext_lazy("deadline"))
    def deadline_time(self, task: Task) -> SafeString | str:
        if task.is_expired:
            return format_html(
                '{} <span class="scylla-badge scylla-expired">expired</span>', moment(task.deadline)
            )
        return moment(task.deadline)

    @admin.display(description=gettext_lazy("not before"))
    def not_before_at(self, task: Task) -> SafeString | str:
        """The delayed start; a follow-up's is its own, taken once its parents completed."""
        if task.not_before != HELD:
            return moment(task.not_before)
        own = followups.own_not_before([task])[task.pk]
        if not followups.waits_for_parents(task):
            return moment(own)
        if own is None:
            return "waiting for parents"
        return format_html("waiting for parents, then {}", moment(own))

    @admin.display(description=gettext_lazy("waits for"))
    def parents_list(self, task: Task) -> SafeString | str:
        """The parents of a waiting follow-up, each linked, with its status."""
        shown = followups.parents(task, limit=PARENTS_LIMIT + 1)
        if not shown:
            return "-"
        items = format_html_join("", "{}", ((parent_item(p),) for p in shown[:PARENTS_LIMIT]))
        more = ""
        if len(shown) > PARENTS_LIMIT:
            total = Dependency.objects.filter(child_id=task.pk).count()
            more = f"and {total - PARENTS_LIMIT:,} more"
        return format_html('<ul class="scylla-parents">{}</ul>{}', items, more)

    @admin.display(description=gettext_lazy("history"))
    def history_note(self, task: Task) -> str:
        count = History.objects.filter(task=task).count()
        if not count:
            return _("No events yet: the task was never leased.")
        if count > HISTORY_LIMIT:
            return f"{count:,} events; the latest {HISTORY_LIMIT} are shown below."
        return f"{plural(count, 'event')}, shown below."
