"""When: the task's page's times (created, updated, the delayed start, the deadline, expiry, dead
letter), each with its age."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy

from ... import followups
from ...models import AFTER_PARENTS, PAUSED, Task, task_pauses
from ..display import moment, shown_field

created_time = shown_field("created_time", "created", moment)
updated_time = shown_field("updated_time", "updated", moment)


@admin.display(description=gettext_lazy("deadline"))
def deadline_time(task: Task) -> SafeString | str:
    if task.is_expired:
        return format_html(
            '{} <span class="scylla-badge scylla-expired">expired</span>', moment(task.deadline)
        )
    return moment(task.deadline)


@admin.display(description=gettext_lazy("not before"))
def not_before_at(task: Task) -> SafeString | str:
    """The delayed start; a follow-up's is its own, taken once its parents completed."""
    if task.not_before == PAUSED:
        kept = task_pauses.pause_of(task)
        own = kept.not_before if kept is not None else None
        return format_html("paused, then {}", moment(own)) if own else "paused"
    if task.not_before != AFTER_PARENTS:
        return moment(task.not_before)
    own = followups.own_not_before([task])[task.pk]
    if not followups.waits_for_parents(task):
        return moment(own)
    if own is None:
        return "waiting for parents"
    return format_html("waiting for parents, then {}", moment(own))


@admin.display(description=gettext_lazy("expires"))
def expires_time(task: Task) -> SafeString | str:
    return moment(task.expires_at)


@admin.display(description=gettext_lazy("dead letter since"))
def dead_at(task: Task) -> SafeString | str:
    return "-" if task.dead is None else moment(task.dead)
