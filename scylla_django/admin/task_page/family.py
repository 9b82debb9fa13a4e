"""The task's relatives: the task that spawned it, the tasks it spawned, the parents a follow-up
waits for, and its batch; each linked, with its status."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ... import followups
from ...models import Dependency, Task
from ..display import changelist_url, status_badge

PARENTS_LIMIT = 100
CHILDREN_LIMIT = 100


def parent_item(parent: followups.Parent) -> SafeString:
    """A parent of a follow-up: a link to its page and its status; "purged" once it is gone."""
    if parent.status is None:
        return format_html('<li>{} <span class="scylla-age">purged</span></li>', parent.rn)
    url = reverse("admin:scylla_django_task_change", args=[parent.id])
    return format_html(
        '<li><a href="{}">{}</a> {}</li>', url, parent.rn, status_badge(parent.status)
    )


@admin.display(description=gettext_lazy("waits for"))
def parents_list(task: Task) -> SafeString | str:
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


@admin.display(description=gettext_lazy("parent"))
def parent_link(task: Task) -> SafeString | str:
    """The task that spawned this one, linked (its rn only, once purged)."""
    if task.parent is None:
        return "-"
    found = Task.objects.filter(rn=task.parent).values_list("pk", "status").first()
    if found is None:
        return format_html('{} <span class="scylla-age">{}</span>', task.parent, _("purged"))
    url = reverse("admin:scylla_django_task_change", args=[found[0]])
    return format_html('<a href="{}">{}</a> {}', url, task.parent, status_badge(found[1]))


@admin.display(description=gettext_lazy("children"))
def children_list(task: Task) -> SafeString | str:
    """The tasks this one spawned, oldest first, each linked with its status; the rest through
    the task list filtered by parent."""
    shown = list(
        Task.objects.filter(parent=task.rn)
        .order_by("id")
        .values_list("pk", "rn", "status")[: CHILDREN_LIMIT + 1]
    )
    if not shown:
        return "-"
    items = format_html_join(
        "",
        '<li><a href="{}">{}</a> {}</li>',
        (
            (reverse("admin:scylla_django_task_change", args=[pk]), rn, status_badge(status))
            for pk, rn, status in shown[:CHILDREN_LIMIT]
        ),
    )
    every = format_html('<a href="{}">{}</a>', changelist_url(parent=task.rn), _("all children"))
    if len(shown) > CHILDREN_LIMIT:
        every = format_html(
            '{} <a href="{}">{}</a>',
            _("and more:"),
            changelist_url(parent=task.rn),
            _("all children"),
        )
    return format_html('<ul class="scylla-children">{}</ul>{}', items, every)


@admin.display(description=gettext_lazy("batch"))
def batch_link(task: Task) -> SafeString | str:
    if task.batch_id is None:
        return "-"
    url = reverse("admin:scylla_django_batch_change", args=[task.batch_id])
    return format_html('<a href="{}">batch {}</a>', url, task.batch_id)
