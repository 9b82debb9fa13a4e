"""The task pages: a list built for millions of rows, a read-only detail, cancel and purge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KT
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import db, followups
from ..models import History, Task
from ..models.traces import trace_id_of, traceparent_of
from ..validation import UNIQUE_KEY_MAX_LENGTH, queue_validator, rn_validator, worker_id
from .console import ConsolePages
from .databases import DatabaseFilter, DatabasePages, on_named_database, replica_note
from .display import (
    CSS,
    ReadOnly,
    ago,
    can_view_tasks,
    errors_table,
    field_display,
    folded,
    moment,
    pretty_json,
)
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
from .keys import KeyPages
from .task_columns import HISTORY_LIMIT, TaskColumns

COUNT_CAP = 10_000

if TYPE_CHECKING:  # django-stubs makes these generic; Django's classes cannot be subscripted
    TaskAdminBase = admin.ModelAdmin[Task]
    HistoryInlineBase = admin.TabularInline[History, Task]
    PaginatorBase = Paginator[Any]
else:
    TaskAdminBase = admin.ModelAdmin
    HistoryInlineBase = admin.TabularInline
    PaginatorBase = Paginator


# -- counting --------------------------------------------------------------------------------


class ApproximateCount(int):
    """A row count from the planner's estimate: a number to compute with, "about N" to read."""

    def __str__(self) -> str:
        return f"about {int(self):,}"


def estimate_count(queryset: QuerySet[Any]) -> int:
    """The number of rows of `queryset` when it holds more than `COUNT_CAP`.

    PostgreSQL: the planner's estimate from EXPLAIN, kept current by autovacuum's ANALYZE, as an
    ApproximateCount (never below the cap). Other databases: an exact COUNT(*).
    """
    planned = db.planned_rows(queryset)
    if planned is None:
        return queryset.count()
    return ApproximateCount(max(planned, COUNT_CAP + 1))


class EstimatingPaginator(PaginatorBase):
    """A paginator whose count never scans more than `COUNT_CAP` + 1 rows.

    Up to the cap the count is exact (`SELECT COUNT(*) FROM (… LIMIT 10001)`), past it it is
    `estimate_count()`: a filtered list of a million tasks is counted in milliseconds.
    """

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            raise TypeError("EstimatingPaginator pages through querysets")
        capped = queryset.order_by()[: COUNT_CAP + 1].count()
        return capped if capped <= COUNT_CAP else estimate_count(queryset)


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


def task_by_key(key: str) -> Task | None:
    """The task whose id is `key`, else the task whose rn is `key`, else None.

    The payloads are left out: the page loads its task again, whole.
    """
    found = Task.objects.defer("spec", "result", "errors")
    if key.isascii() and key.isdigit() and len(key) <= 18:  # a bigint
        task = found.filter(pk=int(key)).first()
        if task is not None:
            return task
    try:
        rn_validator(key)
    except ValidationError:
        return None
    return found.filter(rn=key).first()


class TaskChangeList(ChangeList):
    """The task list's ChangeList: leaves out the JSON payloads, sorts only on indexes."""

    def get_queryset(
        self, request: HttpRequest, exclude_parameters: list[str | None] | None = None
    ) -> QuerySet[Any]:
        queryset = super().get_queryset(request, exclude_parameters)
        # The first error's code only, extracted by the database: `errors` may weigh a MiB.
        deferred: QuerySet[Any] = queryset.defer("spec", "result", "errors")
        annotated: QuerySet[Any] = deferred.annotate(error_code=KT("errors__0__code"))
        return annotated

    def get_ordering_field(self, field_name: Any) -> Any:
        """Only `sortable_by` columns sort, whatever `?o=` says: others would sort every row."""
        if self.sortable_by is not None and field_name not in self.sortable_by:
            return None
        return super().get_ordering_field(field_name)


@admin.register(Task)
class TaskAdmin(DatabasePages, ReadOnly, TaskColumns, ConsolePages, KeyPages):
    """Tasks: a list built for millions of rows, a read-only detail, cancel and purge."""

    list_display = (
        "rn",
        "queue_link",
        "status_badge",
        "priority",
        "progress_bar",
        "owner_link",
        "leases",
        "created_at",
        "updated_at",
        "deadline_at",
        "error_code",
    )
    # Only columns a full index can serve: rn (unique) and created, sorted by the primary key
    # (the insertion order). The other indexes are partial (ready, running or terminal tasks
    # only) or lead with another column, so sorting a million rows by them is a full sort.
    sortable_by = ("rn", "created_at")
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
    paginator = EstimatingPaginator
    actions = (
        "cancel_selected",
        "purge_selected",
        "retry_selected",
        "release_order_selected",
        "pause_selected",
        "resume_selected",
        "discard_selected",
    )
    inlines = (HistoryInline,)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("rn", "queue"),
                    ("status_badge", "priority", "progress_bar"),
                    ("owner_link", "leases", "unstarted", "deadline_time"),
                    ("created_time", "updated_time", "not_before_at"),
                    ("cpu_time_text", "peak_memory_text"),
                    ("chain", "snoozes", "expires_time"),
                    ("parent_link", "children_list"),
                    ("batch_link", "dead_at"),
                    ("notify", "notified"),
                    ("unique_key_link", "unique_window_text"),
                    ("keys_list", "waiting_line"),
                    ("version", "trace"),
                    ("submitter_text", "starts_line"),
                    ("durable_table",),
                )
            },
        ),
        (
            gettext_lazy("Payload"),
            {"fields": ("spec_json", "result_json", "errors_table", "log_text", "history_note")},
        ),
    )
    readonly_fields = (
        "status_badge",
        "progress_bar",
        "owner_link",
        "deadline_time",
        "created_time",
        "updated_time",
        "not_before_at",
        "spec_json",
        "result_json",
        "errors_table",
        "log_text",
        "history_note",
        "chain",
        "parents_list",
        "parent_link",
        "children_list",
        "expires_time",
        "snoozes",
        "unstarted",
        "unique_key_link",
        "unique_window_text",
        "keys_list",
        "waiting_line",
        "submitter_text",
        "starts_line",
        "durable_table",
        "cpu_time_text",
        "peak_memory_text",
        "batch_link",
        "dead_at",
        "replica_lag",
        "notify",
        "notified",
        "version",
        "trace",
    )

    class Media:
        css = {"all": (CSS,)}

    # -- permissions: read-only (`ReadOnly`) apart from the operations ----------------------
    # No delete view or button, and so no delete_selected action: it loads every row it
    # deletes. Terminal tasks go through purge_selected and the bulk purge page instead.

    # -- the list ---------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return TaskChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Each word must equal the rn, the queue, (for `worker-<n>`) the owner, or the
        unique key.

        Equality, never LIKE: rn, queue and unique key are then answered by their indexes.
        owner has no index, so it is tried only for words that are worker names; a word that
        cannot be any of them (e.g. one holding a character no name may hold) matches nothing.
        """
        for term in search_term.split():
            match = Q(unique_key=term) if len(term) <= UNIQUE_KEY_MAX_LENGTH else Q()
            for field, validator in (("rn", rn_validator), ("queue", queue_validator)):
                try:
                    validator(term)
                except ValidationError:
                    continue
                match |= Q(**{field: term})
            if worker_id(term) is not None:
                match |= Q(owner=term)
            if not match:
                return queryset.none(), False
            queryset = queryset.filter(match)
        return queryset, False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list; a POST naming an action the user may not run is refused (403)."""
        if request.method == "POST":
            allowed = self.get_actions(request)
            if any(name and name not in allowed for name in request.POST.getlist("action")):
                raise PermissionDenied
        context = {**self.console_links(request), **(extra_context or {})}
        return super().changelist_view(request, context)

    created_at = field_display("created", ago, ordering="id")
    updated_at = field_display("updated", ago)

    # -- the detail -------------------------------------------------------------------------

    created_time = field_display("created", moment)
    updated_time = field_display("updated", moment)

    def get_fieldsets(self, request: HttpRequest, obj: Task | None = None) -> Any:
        """The task's fields; a waiting follow-up's parents among them, and how far behind
        the replica is when the page is read from one (`SCYLLA["READ_DATABASE"]`)."""
        fieldsets = super().get_fieldsets(request, obj)
        extra = []
        if obj is not None and followups.waits_for_parents(obj):
            extra.append(("parents_list",))
        if obj is not None and replica_note() is not None:
            extra.append(("replica_lag",))
        if not extra:
            return fieldsets
        (name, options), *rest = fieldsets
        return [(name, {**options, "fields": (*options["fields"], *extra)}), *rest]

    @admin.display(description=gettext_lazy("trace"))
    def trace(self, task: Task) -> str:
        """The trace id of the span that submitted the task (its traceparent on hover)."""
        traceparent = traceparent_of(task._state.db or "default", task.rn)
        if traceparent is None:
            return "-"
        return format_html('<span title="{}">{}</span>', traceparent, trace_id_of(traceparent))

    @admin.display(description=gettext_lazy("replica"))
    def replica_lag(self, task: Task) -> str:
        """How far behind the replica this page was read from is."""
        return replica_note() or "-"

    spec_json = field_display("spec", pretty_json)
    result_json = field_display("result", pretty_json)
    errors_table = field_display("errors", errors_table)

    @admin.display(description=gettext_lazy("log"))
    def log_text(self, task: Task) -> SafeString | str:
        """What the handler logged in the task's last run (docs/howto/task-logs.md)."""
        text = task.read_log()
        return "-" if text is None else folded(text)

    def get_formset_kwargs(
        self, request: HttpRequest, obj: Task, inline: Any, prefix: str
    ) -> dict[str, Any]:
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        if isinstance(inline, HistoryInline):
            latest = History.objects.filter(task=obj).order_by("-id").values_list("pk", flat=True)
            kwargs["queryset"] = kwargs["queryset"].filter(pk__in=list(latest[:HISTORY_LIMIT]))
        return kwargs

    # -- actions ----------------------------------------------------------------------------

    # -- the task page's buttons ------------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The task page, with "Cancel" and "Reset lease now" for the users who may use them.

        The address names the task's id, as the admin's links do, or its rn, as people and the
        rest of the app do: an rn redirects to the id's address. An unknown key is a message
        and the task list, as Django's admin does for an unknown id.
        """
        task = self.task_at(request, object_id, "change")
        if not isinstance(task, Task):
            return task
        context = {**(extra_context or {})}
        if self.has_cancel_permission(request):
            context.update(self.buttons(task))
        if self.has_control_permission(request):
            context.update(self.order_button(task))
        return super().change_view(request, object_id, form_url, context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Django's history page of a task, by id or by rn (as `change_view`)."""
        task = self.task_at(request, object_id, "history")
        if not isinstance(task, Task):
            return task
        return super().history_view(request, object_id, extra_context)

    def task_at(self, request: HttpRequest, object_id: str, page: str) -> Task | HttpResponse:
        """The task that the address of a task's `page` names by `object_id`, an id or an rn;
        or the answer instead: a redirect from an rn to the id's address, or a message and the
        task list for an unknown key. A user who may not view tasks is refused first (403)."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        key = unquote(object_id)
        task = task_by_key(key)
        if task is None:
            self.message_user(
                request,
                _("No task has the id or rn “%(key)s”. Perhaps it was purged?") % {"key": key},
                messages.WARNING,
            )
            return HttpResponseRedirect(reverse("admin:scylla_django_task_changelist"))
        if str(task.pk) != key:
            url = reverse(f"admin:scylla_django_task_{page}", args=[task.pk])
            query = request.GET.urlencode()
            return HttpResponseRedirect(f"{url}?{query}" if query else url)
        return task

    # -- queue control (the dashboard's queue rows) -----------------------------------------

    # -- dashboard and bulk purge pages ----------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(route, on_named_database(self.admin_site.admin_view(view)), name=name)
            for route, view, name in (
                ("dashboard/", self.dashboard_view, "scylla_django_task_dashboard"),
                (
                    "dashboard/charts/",
                    self.dashboard_charts_view,
                    "scylla_django_task_dashboard_charts",
                ),
                ("purge/", self.purge_view, "scylla_django_task_purge"),
                ("<int:pk>/reset-lease/", self.reset_lease_view, "scylla_django_task_reset_lease"),
                ("<int:pk>/cancel/", self.cancel_view, "scylla_django_task_cancel"),
                (
                    "<int:pk>/release-order/",
                    self.release_order_view,
                    "scylla_django_task_release_order",
                ),
                ("keys/", self.keys_view, "scylla_django_task_keys"),
                (
                    "queues/<str:queue>/<str:operation>/",
                    self.queue_view,
                    "scylla_django_queue_control",
                ),
            )
        ]
        return [*own, *super().get_urls()]
