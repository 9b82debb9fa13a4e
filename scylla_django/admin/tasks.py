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
from django.utils.translation import gettext_lazy

from .. import followups
from ..models import Task
from . import console, permissions, task_actions, task_columns, task_list, task_operations
from .databases import DatabaseFilter, DatabasePages, on_named_database, replica_lag, replica_note
from .display import CSS, ReadOnly
from .filters import (
    BatchFilter,
    DateRangeFilter,
    DeadFilter,
    ErrorCodeFilter,
    KeyFilter,
    OwnerFilter,
    PriorityFilter,
    QueueFilter,
    StatusFilter,
    SubmitterFilter,
    UniqueKeyFilter,
)
from .keys import KeysView
from .schedules import chain
from .task_page import durable, family, history, keys, origin, payload, times, usage, waiting
from .task_page.address import task_at

if TYPE_CHECKING:  # django-stubs makes ModelAdmin generic; Django's cannot be subscripted
    TaskAdminBase = admin.ModelAdmin[Task]
else:
    TaskAdminBase = admin.ModelAdmin


@admin.register(Task)
class TaskAdmin(DatabasePages, ReadOnly, TaskAdminBase):
    """Tasks: a list built for millions of rows, a read-only detail, cancel and purge.

    Its columns, fields and actions are functions (of a task, or Django's action signature),
    which Django's admin takes beside names; django-stubs types some of these options as names
    only, hence the `type: ignore`s below.
    """

    list_display = (
        "rn",
        task_columns.queue_link,
        task_columns.status_badge,
        "priority",
        task_columns.progress_bar,
        task_columns.owner_link,
        "leases",
        task_columns.created_at,
        task_columns.updated_at,
        task_columns.deadline_at,
        task_columns.error_code,
    )
    # Only columns a full index can serve: rn (unique) and created, sorted by the primary key
    # (the insertion order). The other indexes are partial (ready, running or terminal tasks
    # only) or lead with another column, so sorting a million rows by them is a full sort.
    sortable_by = ("rn", task_columns.created_at)  # type: ignore[assignment]
    list_filter = (
        DatabaseFilter,
        StatusFilter,
        QueueFilter,
        PriorityFilter,
        OwnerFilter,
        ErrorCodeFilter,
        DeadFilter,
        BatchFilter,
        UniqueKeyFilter,
        KeyFilter,
        SubmitterFilter,
        ("created", DateRangeFilter),
        ("updated", DateRangeFilter),
    )
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
    actions = (  # type: ignore[assignment]
        task_actions.cancel_selected,
        task_actions.purge_selected,
        task_actions.retry_selected,
        task_actions.release_order_selected,
        task_actions.hold_selected,
        task_actions.release_selected,
        task_actions.discard_selected,
    )
    # About 500,000 tasks a request at the 25,000/s measured (docs/howto/admin.md); for more,
    # there is scylla_cleanup.
    purge_time_budget = timedelta(seconds=20)
    inlines = (history.HistoryInline,)
    fieldsets = (
        (
            None,
            {
                "fields": (  # type: ignore[typeddict-item]
                    ("rn", "queue"),
                    (task_columns.status_badge, "priority", task_columns.progress_bar),
                    (task_columns.owner_link, "leases", "unstarted", times.deadline_time),
                    (times.created_time, times.updated_time, times.not_before_at),
                    (usage.cpu_time_text, usage.peak_memory_text),
                    (chain, "snoozes", times.expires_time),
                    (family.parent_link, family.children_list),
                    (family.batch_link, times.dead_at),
                    ("notify", "notified"),
                    (keys.unique_key_link, keys.unique_window_text),
                    (keys.keys_list, waiting.waiting_line),
                    ("version", origin.trace),
                    (origin.submitter_text, waiting.starts_line),
                    (durable.durable_table,),
                )
            },
        ),
        (
            gettext_lazy("Payload"),
            {
                "fields": (  # type: ignore[typeddict-item]
                    payload.spec_json,
                    payload.result_json,
                    payload.errors_table,
                    payload.log_text,
                    history.history_note,
                )
            },
        ),
    )
    readonly_fields = (  # type: ignore[assignment]
        task_columns.status_badge,
        task_columns.progress_bar,
        task_columns.owner_link,
        times.deadline_time,
        times.created_time,
        times.updated_time,
        times.not_before_at,
        payload.spec_json,
        payload.result_json,
        payload.errors_table,
        payload.log_text,
        history.history_note,
        chain,
        family.parents_list,
        family.parent_link,
        family.children_list,
        times.expires_time,
        "snoozes",
        "unstarted",
        keys.unique_key_link,
        keys.unique_window_text,
        keys.keys_list,
        waiting.waiting_line,
        origin.submitter_text,
        waiting.starts_line,
        durable.durable_table,
        usage.cpu_time_text,
        usage.peak_memory_text,
        family.batch_link,
        times.dead_at,
        replica_lag,
        "notify",
        "notified",
        "version",
        origin.trace,
    )

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
        """The task's fields; a waiting follow-up's parents among them, and how far behind
        the replica is when the page is read from one (`SCYLLA["READ_DATABASE"]`)."""
        fieldsets = super().get_fieldsets(request, obj)
        extra: list[tuple[Any, ...]] = []
        if obj is not None and followups.waits_for_parents(obj):
            extra.append((family.parents_list,))
        if obj is not None and replica_note() is not None:
            extra.append((replica_lag,))
        if not extra:
            return fieldsets
        (name, options), *rest = fieldsets
        return [(name, {**options, "fields": (*options["fields"], *extra)}), *rest]

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
        own = [
            path(
                route,
                on_named_database(self.admin_site.admin_view(view.as_view(model_admin=self))),
                name=name,
            )
            for route, view, name in (
                ("dashboard/", console.DashboardView, "scylla_django_task_dashboard"),
                (
                    "dashboard/charts/",
                    console.DashboardChartsView,
                    "scylla_django_task_dashboard_charts",
                ),
                ("purge/", console.PurgeView, "scylla_django_task_purge"),
                (
                    "<int:pk>/reset-lease/",
                    task_operations.ResetLeaseView,
                    "scylla_django_task_reset_lease",
                ),
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
        ]
        return [*own, *super().get_urls()]
