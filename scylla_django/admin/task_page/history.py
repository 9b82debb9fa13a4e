"""A task's History on its page: the latest `HISTORY_LIMIT` entries, newest first, and how many
there are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ...models import History, Task
from ...text import plural
from ..display import ReadOnly, can_view_tasks, field_display, moment

if TYPE_CHECKING:  # django-stubs makes TabularInline generic; Django's cannot be subscripted
    HistoryInlineBase = admin.TabularInline[History, Task]
else:
    HistoryInlineBase = admin.TabularInline

HISTORY_LIMIT = 200


class HistoryInline(ReadOnly, HistoryInlineBase):
    """A task's History, newest first, read-only; the latest `HISTORY_LIMIT` entries."""

    model = History
    fields = ("event", "worker", "progress", "when")
    readonly_fields = fields
    ordering = ("-id",)
    extra = 0
    max_num = 0
    can_delete = False
    verbose_name_plural = "history, newest first"

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view_tasks(request)

    @admin.display(description="_typ")
    def event(self, entry: History) -> str:
        return entry.typ

    when = field_display("time", moment)


def latest(entries: QuerySet[History], task: Task) -> QuerySet[History]:
    """Of `entries` (the inline's), the latest `HISTORY_LIMIT` of `task`'s."""
    newest = History.objects.filter(task=task).order_by("-id").values_list("pk", flat=True)
    return entries.filter(pk__in=list(newest[:HISTORY_LIMIT]))


@admin.display(description=gettext_lazy("history"))
def history_note(task: Task) -> str:
    count = History.objects.filter(task=task).count()
    if not count:
        return _("No events yet: the task was never leased.")
    if count > HISTORY_LIMIT:
        return f"{count:,} events; the latest {HISTORY_LIMIT} are shown below."
    return f"{plural(count, 'event')}, shown below."
