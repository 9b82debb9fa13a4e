"""The worker pages: the registry of worker processes, read-only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy

from ..enums import Status
from ..models import Worker, WorkerQuerySet
from ..validation import worker_id
from .dashboard import workers as board
from .databases import DatabasePages
from .display import (
    CSS,
    ReadOnly,
    ago,
    can_view_tasks,
    changelist_url,
    field_display,
    moment,
    status_badge,
)
from .filters import WorkerStateFilter

if TYPE_CHECKING:  # django-stubs makes this generic; Django's class cannot be subscripted
    WorkerAdminBase = admin.ModelAdmin[Worker]
else:
    WorkerAdminBase = admin.ModelAdmin


class WorkerChangeList(ChangeList):
    """The worker list's ChangeList: each worker's state on the database clock (annotated by
    the list's query), and the page's running tasks in two more queries."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        names = [worker.name for worker in self.result_list]
        running = board.running_counts(names)
        held = board.held_tasks(
            [name for name in names if running.get(name)], len(names) * board.HELD_LIMIT
        )
        for worker in self.result_list:
            worker.running_tasks = running.get(worker.name, 0)
            worker.held_tasks = held.get(worker.name, [])[: board.HELD_LIMIT]


@admin.register(Worker)
class WorkerAdmin(DatabasePages, ReadOnly, WorkerAdminBase):
    """The Worker registry, read-only."""

    list_display = (
        "name",
        "state",
        "hostname",
        "pid",
        "queue_list",
        "running",
        "held",
        "started_at",
        "last_seen_at",
        "user",
    )
    list_filter = (WorkerStateFilter,)
    list_select_related = ("user",)
    search_fields = ("hostname",)
    search_help_text = "A worker name (worker-<n>) or part of a host name."
    ordering = ("-id",)
    change_list_template = "scylla_django/admin/change_list.html"
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    sortable_by = ("name", "started_at", "last_seen_at")
    fields = (
        "name",
        "state",
        "hostname",
        "pid",
        "queue_list",
        "capacity",
        "running",
        "held",
        "started_time",
        "last_seen_time",
        "stopped_time",
        "user",
    )
    readonly_fields = fields

    class Media:
        css = {"all": (CSS,)}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkerChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        """Every worker, with its `liveness` (alive, silent, dead, stopped) on the database
        clock."""
        queryset = super().get_queryset(request)
        if not isinstance(queryset, WorkerQuerySet):
            raise TypeError(f"expected a WorkerQuerySet, not {type(queryset).__name__}")
        return queryset.with_state()

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """`worker-<n>` finds that worker; other words must be part of the host name."""
        for term in search_term.split():
            pk = worker_id(term)
            if pk is not None:
                queryset = queryset.filter(pk=pk)
            else:
                queryset = queryset.filter(hostname__icontains=term)
        return queryset, False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, with a link to the dashboard for the users who may see it."""
        context = {**(extra_context or {})}
        if can_view_tasks(request):
            context["scylla_dashboard_url"] = reverse("admin:scylla_django_task_dashboard")
        return super().changelist_view(request, context)

    @admin.display(description=gettext_lazy("name"), ordering="id")
    def name(self, worker: Worker) -> str:
        return worker.name

    @admin.display(description=gettext_lazy("state"))
    def state(self, worker: Worker) -> SafeString:
        liveness = getattr(worker, "liveness", None)
        return status_badge(str(liveness) if liveness else worker.current_state())

    @admin.display(description=gettext_lazy("queues"))
    def queue_list(self, worker: Worker) -> str:
        return ", ".join(str(q) for q in worker.queues) if isinstance(worker.queues, list) else ""

    @admin.display(description=gettext_lazy("running"))
    def running(self, worker: Worker) -> SafeString:
        count = getattr(worker, "running_tasks", None)
        if count is None:
            count = board.running_counts([worker.name]).get(worker.name, 0)
        url = changelist_url(owner=worker.name, status=Status.RUNNING)
        return format_html('<a href="{}">{} / {}</a>', url, count, worker.capacity)

    @admin.display(description=gettext_lazy("holds"))
    def held(self, worker: Worker) -> SafeString | str:
        tasks = getattr(worker, "held_tasks", None)
        if tasks is None:
            names = board.held_tasks([worker.name], board.HELD_LIMIT)
            tasks = names.get(worker.name, [])
        if not tasks:
            return "-"
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            ((reverse("admin:scylla_django_task_change", args=[pk]), rn) for pk, rn in tasks),
        )

    started_at = field_display("started", ago, ordering="started")
    last_seen_at = field_display("last_seen", ago, ordering="last_seen")
    started_time = field_display("started", moment)
    last_seen_time = field_display("last_seen", moment)
    stopped_time = field_display("stopped", moment)
