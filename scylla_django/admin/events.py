"""The event pages: the stored events, newest first, read-only, with the schedules whose
firings consumed each (docs/howto/triggers.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from ..models import Consumption, Event
from .databases import DatabaseFilter, DatabasePages
from .display import CSS, ReadOnly, ago, field_display, moment, pretty_json
from .filters import ConsumedFilter, DateRangeFilter, KindFilter
from .task_list import EstimatingPaginator

if TYPE_CHECKING:  # django-stubs makes this generic; Django's class cannot be subscripted
    EventAdminBase = admin.ModelAdmin[Event]
else:
    EventAdminBase = admin.ModelAdmin


@admin.register(Event)
class EventAdmin(DatabasePages, ReadOnly, EventAdminBase):
    """The stored events, read-only: filtered by kind, time and consumption.

    Like the task list, the list never counts every row (`EstimatingPaginator`), is ordered by
    the primary key (the insertion order) and filters on exact kinds and time ranges only.
    """

    list_display = ("__str__", "kind", "time_ago", "consumers")
    list_filter = (
        DatabaseFilter,
        KindFilter,
        ConsumedFilter,
        ("time", DateRangeFilter),
    )
    ordering = ("-id",)
    sortable_by = ()
    change_list_template = "scylla_django/admin/change_list.html"
    list_per_page = 100
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatingPaginator
    fields = ("kind", "time_moment", "payload_json", "history", "consumers")
    readonly_fields = fields

    time_ago = field_display("time", ago, "time")
    time_moment = field_display("time", moment, "time")
    payload_json = field_display("payload", pretty_json, "payload")

    class Media:
        css = {"all": (CSS,)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Event]:
        """The events, each with its consumptions and their schedules (one query a page)."""
        consumers = Consumption.objects.select_related("schedule").only(
            "event_id", "firing_id", "schedule__name"
        )
        return (
            super()
            .get_queryset(request)
            .prefetch_related(Prefetch("consumptions", queryset=consumers))
        )

    @admin.display(description="consumed by")
    def consumers(self, event: Event) -> SafeString | str:
        """The schedules whose firings consumed the event, each linked to its page."""
        consumptions = list(event.consumptions.all())
        if not consumptions:
            return "-"
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            (
                (
                    reverse("admin:scylla_django_schedule_change", args=[c.schedule_id]),
                    c.schedule.name,
                )
                for c in consumptions
            ),
        )
