"""The task admin: its configuration, and the wiring of the rooms that make up the task pages.

`TaskAdmin` holds what Django's `ModelAdmin` asks for (columns, filters, fields, actions,
permissions, URLs); what it shows and does lives by concept beside it:

| module | holds |
|---|---|
| `task_list` | the list built for millions of rows: its count, its query, its search |
| `task_columns` | the list's columns, each a function of one task |
| `task_page` | the task's page: its fields by what they tell, its History, its address |
| `task_operations` | the page's buttons (reset lease, cancel, release order key), as views |
| `task_actions` | the list's actions on the selected tasks |
| `console` | the pages beside the list (dashboard, charts, pausing a queue, bulk purge) |
| `keys` | the "Locks and limits" page |
| `permissions` | who may do what |
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from ..models import Task
from . import console, permissions, task_actions, task_columns, task_list, task_operations
from .databases import DatabasePages, on_named_database
from .display import CSS, ReadOnly
from .filters import TASK_FILTERS
from .keys import KeysView
from .task_page import history, layout
from .task_page.address import task_at

if TYPE_CHECKING:  # django-stubs makes ModelAdmin generic; Django's cannot be subscripted
    TaskAdminBase = admin.ModelAdmin[Task]
else:
    TaskAdminBase = admin.ModelAdmin


PAGES: tuple[tuple[str, type[console.ConsoleView], str], ...] = (
    ("dashboard/", console.DashboardView, "scylla_django_task_dashboard"),
    ("dashboard/charts/", console.DashboardChartsView, "scylla_django_task_dashboard_charts"),
    ("purge/", console.PurgeView, "scylla_django_task_purge"),
    ("<int:pk>/reset-lease/", task_operations.ResetLeaseView, "scylla_django_task_reset_lease"),
    ("<int:pk>/cancel/", task_operations.CancelView, "scylla_django_task_cancel"),
    (
        "<int:pk>/release-order/",
        task_operations.ReleaseOrderView,
        "scylla_django_task_release_order",
    ),
    ("keys/", KeysView, "scylla_django_task_keys"),
    (
        "queues/<str:queue>/<str:operation>/",
        console.QueueControlView,
        "scylla_django_queue_control",
    ),
)
"""The pages `TaskAdmin` mounts beside the task list: (route, view class, URL name)."""


@admin.register(Task)
class TaskAdmin(DatabasePages, ReadOnly, TaskAdminBase):
    """Tasks: a list built for millions of rows, a read-only detail, cancel and purge."""

    list_display = task_columns.COLUMNS
    sortable_by = task_columns.SORTABLE
    list_filter = TASK_FILTERS
    search_fields = ("rn", "queue", "owner", "unique_key")
    search_help_text = _(
        "An exact rn, queue, worker name (worker-<n>) or unique key; every word given must match."
    )
    ordering = ("-id",)
    change_list_template = "scylla_django/admin/change_list.html"
    list_per_page = 100
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = task_list.EstimatingPaginator
    # No delete view or button, and so no delete_selected action: it loads every row it
    # deletes. Terminal tasks go through purge_selected and the bulk purge page instead.
    actions = task_actions.ACTIONS
    # About 500,000 tasks a request at the 25,000/s measured (docs/howto/admin.md); for more,
    # there is scylla_cleanup.
    purge_time_budget = timedelta(seconds=20)
    inlines = (history.HistoryInline,)
    fieldsets = layout.FIELDSETS
    readonly_fields = layout.READ_ONLY

    class Media:
        css = {"all": (CSS,)}

    # -- permissions: read-only (`ReadOnly`) apart from the operations ----------------------

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return permissions.may_cancel(request)

    def has_cancel_own_permission(self, request: HttpRequest) -> bool:
        return permissions.may_cancel_own(request)

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return permissions.may_purge(request)

    def has_submit_permission(self, request: HttpRequest) -> bool:
        return permissions.may_submit(request)

    def has_control_permission(self, request: HttpRequest) -> bool:
        return permissions.may_control(request)

    def has_queue_permission(self, request: HttpRequest) -> bool:
        return permissions.may_control(request)

    # -- the list (`task_list`, `task_columns`, `task_actions`) -----------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return task_list.TaskChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        return task_list.search(queryset, search_term), False

    def action_checkbox(self, obj: Task) -> SafeString:
        return task_columns.action_checkbox(obj)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list; a POST naming an action the user may not run is refused (403)."""
        if request.method == "POST":
            allowed = self.get_actions(request)
            if any(name and name not in allowed for name in request.POST.getlist("action")):
                raise PermissionDenied
        context = {**console.console_links(self, request), **(extra_context or {})}
        return super().changelist_view(request, context)

    # -- the task's page (`task_page`, `task_operations`) -----------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Task | None = None) -> Any:
        """The page's fields, with those that show on some pages only (`layout.with_extras`)."""
        return layout.with_extras(super().get_fieldsets(request, obj), obj)

    def get_formset_kwargs(
        self, request: HttpRequest, obj: Task, inline: Any, prefix: str
    ) -> dict[str, Any]:
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        if isinstance(inline, history.HistoryInline):
            kwargs["queryset"] = history.latest(kwargs["queryset"], obj)
        return kwargs

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The task page, by id or by rn (`task_page.address`), with the buttons that apply
        to the task for the users who may use them."""
        task = task_at(self, request, object_id, "change")
        if not isinstance(task, Task):
            return task
        context = {**(extra_context or {})}
        if self.has_cancel_permission(request):
            context.update(task_operations.cancel_buttons(task))
        if self.has_control_permission(request):
            context.update(task_operations.order_button(task))
        return super().change_view(request, object_id, form_url, context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Django's history page of a task, by id or by rn (as `change_view`)."""
        task = task_at(self, request, object_id, "history")
        if not isinstance(task, Task):
            return task
        return super().history_view(request, object_id, extra_context)

    # -- the pages beside the list (`console`, `keys`, `task_operations`) -------------------

    def get_urls(self) -> list[URLPattern]:
        """The pages beside the list (`PAGES`), each run by the admin site's `admin_view()` on
        the database the request names, then Django's own."""
        own = [
            path(
                route,
                on_named_database(self.admin_site.admin_view(view.as_view(model_admin=self))),
                name=name,
            )
            for route, view, name in PAGES
        ]
        return [*own, *super().get_urls()]
