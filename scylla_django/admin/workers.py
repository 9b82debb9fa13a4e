"""The worker pages: the registry of worker processes, read-only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..enums import Status
from ..models import Worker
from ..validation import worker_id
from . import dashboard
from .display import CSS, ago, can_view_tasks, changelist_url, moment, status_badge
from .filters import WorkerStateFilter

if TYPE_CHECKING:  # django-stubs makes this generic; Django's class cannot be subscripted
    WorkerAdminBase = admin.ModelAdmin[Worker]
else:
    WorkerAdminBase = admin.ModelAdmin


class WorkerChangeList(ChangeList):
    """The worker list's ChangeList: the page's running tasks and live workers, two queries."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        running = dashboard.running_counts(worker.name for worker in self.result_list)
        alive = dashboard.alive_ids(worker.pk for worker in self.result_list)
        for worker in self.result_list:
            worker.running_tasks = running.get(worker.name, 0)
            worker.is_alive = worker.pk in alive


@admin.register(Worker)
class WorkerAdmin(WorkerAdminBase):
    """The Worker registry, read-only."""

    list_display = (
        "name",
        "state",
        "hostname",
        "pid",
        "queue_list",
        "running",
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
        "started_time",
        "last_seen_time",
        "stopped_time",
        "user",
    )
    readonly_fields = fields

    class Media:
        css = {"all": (CSS,)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkerChangeList

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

    @admin.display(description="name", ordering="id")
    def name(self, worker: Worker) -> str:
        return worker.name

    @admin.display(description="state")
    def state(self, worker: Worker) -> SafeString:
        if worker.stopped is not None:
            return status_badge("stopped")
        alive = getattr(worker, "is_alive", None)
        if alive is None:
            alive = worker.pk in dashboard.alive_ids([worker.pk])
        return status_badge("alive" if alive else "silent")

    @admin.display(description="queues")
    def queue_list(self, worker: Worker) -> str:
        return ", ".join(str(q) for q in worker.queues) if isinstance(worker.queues, list) else ""

    @admin.display(description="running")
    def running(self, worker: Worker) -> SafeString:
        count = getattr(worker, "running_tasks", None)
        if count is None:
            count = dashboard.running_counts([worker.name]).get(worker.name, 0)
        url = changelist_url(owner=worker.name, status=Status.RUNNING)
        return format_html('<a href="{}">{} / {}</a>', url, count, worker.capacity)

    @admin.display(description="started", ordering="started")
    def started_at(self, worker: Worker) -> SafeString | str:
        return ago(worker.started)

    @admin.display(description="last seen", ordering="last_seen")
    def last_seen_at(self, worker: Worker) -> SafeString | str:
        return ago(worker.last_seen)

    @admin.display(description="started")
    def started_time(self, worker: Worker) -> SafeString | str:
        return moment(worker.started)

    @admin.display(description="last seen")
    def last_seen_time(self, worker: Worker) -> SafeString | str:
        return moment(worker.last_seen)

    @admin.display(description="stopped")
    def stopped_time(self, worker: Worker) -> SafeString | str:
        return moment(worker.stopped)
