"""The task pages: a list built for millions of rows, a read-only detail, cancel and purge."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import django
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KT
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import db, followups
from ..conf import scylla_settings
from ..durations import ago as ago_words
from ..durations import short
from ..enums import TERMINAL_STATUSES, Liveness, Operation, Status, sources
from ..exceptions import InvalidTransition, LeaseLost, OwnerAlive, TaskNotFound
from ..models import HELD, Dependency, History, QueueSetting, Task, TaskQuerySet, Worker
from ..text import format_duration, plural
from ..validation import UNIQUE_KEY_MAX_LENGTH, queue_validator, rn_validator, worker_id
from . import charts, dashboard
from .display import (
    CSS,
    ReadOnly,
    ago,
    can_view_tasks,
    changelist_url,
    errors_table,
    field_display,
    moment,
    pretty_json,
    status_badge,
    tasks,
    timestamp,
)
from .filters import (
    DateRangeFilter,
    ErrorCodeFilter,
    OwnerFilter,
    PriorityFilter,
    QueueFilter,
    StatusFilter,
    UniqueKeyFilter,
)
from .purge import PurgeForm, TimedPurge
from .schedules import chain as chain_links
from .schedules import retry_selected as retry_tasks

logger = logging.getLogger("scylla_django")

COUNT_CAP = 10_000
HISTORY_LIMIT = 200
PARENTS_LIMIT = 100

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
        assert isinstance(queryset, QuerySet), "EstimatingPaginator pages through querysets"
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


def parent_item(parent: followups.Parent) -> SafeString:
    """A parent of a follow-up: a link to its page and its status; "purged" once it is gone."""
    if parent.status is None:
        return format_html('<li>{} <span class="scylla-age">purged</span></li>', parent.rn)
    url = reverse("admin:scylla_django_task_change", args=[parent.id])
    return format_html(
        '<li><a href="{}">{}</a> {}</li>', url, parent.rn, status_badge(parent.status)
    )


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
class TaskAdmin(ReadOnly, TaskAdminBase):
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
        StatusFilter,
        QueueFilter,
        PriorityFilter,
        OwnerFilter,
        ErrorCodeFilter,
        UniqueKeyFilter,
        ("created", DateRangeFilter),
        ("updated", DateRangeFilter),
    )
    search_fields = ("rn", "queue", "owner", "unique_key")
    search_help_text = (
        "An exact rn, queue, worker name (worker-<n>) or unique key; every word given must match."
    )
    ordering = ("-id",)
    change_list_template = "scylla_django/admin/change_list.html"
    list_per_page = 100
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatingPaginator
    actions = ("cancel_selected", "purge_selected", "retry_selected")
    inlines = (HistoryInline,)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("rn", "queue"),
                    ("status_badge", "priority", "progress_bar"),
                    ("owner_link", "leases", "deadline_time"),
                    ("created_time", "updated_time", "not_before_at"),
                    ("chain",),
                    ("unique_key_link", "unique_window_text"),
                )
            },
        ),
        ("Payload", {"fields": ("spec_json", "result_json", "errors_table", "history_note")}),
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
        "history_note",
        "chain",
        "parents_list",
        "unique_key_link",
        "unique_window_text",
    )
    # About 500,000 tasks a request at the 25,000/s measured (docs/admin.md); for more, there
    # is scylla_cleanup.
    purge_time_budget = timedelta(seconds=20)

    class Media:
        css = {"all": (CSS,)}

    # -- permissions: read-only (`ReadOnly`) apart from the operations ----------------------
    # No delete view or button, and so no delete_selected action: it loads every row it
    # deletes. Terminal tasks go through purge_selected and the bulk purge page instead.

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """May cancel tasks: `scylla_django.cancel_task`."""
        return request.user.has_perm("scylla_django.cancel_task")

    def has_purge_permission(self, request: HttpRequest) -> bool:
        """May delete terminal tasks: `scylla_django.delete_task`."""
        return request.user.has_perm("scylla_django.delete_task")

    def has_submit_permission(self, request: HttpRequest) -> bool:
        """May submit tasks, and so retry them: `scylla_django.submit_task`."""
        return request.user.has_perm("scylla_django.submit_task")

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

    def console_links(self, request: HttpRequest) -> dict[str, str]:
        """URLs of the dashboard and the bulk purge page, for the users who may use them."""
        links = {}
        if self.has_view_permission(request):
            links["scylla_dashboard_url"] = reverse("admin:scylla_django_task_dashboard")
        if self.has_purge_permission(request):
            links["scylla_purge_url"] = reverse("admin:scylla_django_task_purge")
        return links

    @admin.display(description="queue")
    def queue_link(self, task: Task) -> SafeString:
        return format_html('<a href="{}">{}</a>', changelist_url(queue=task.queue), task.queue)

    @admin.display(description="status")
    def status_badge(self, task: Task) -> SafeString:
        if followups.waits_for_parents(task):
            return format_html(
                '{} <span class="scylla-age">waiting for parents</span>', status_badge(task.status)
            )
        return status_badge(task.status)

    @admin.display(description="progress")
    def progress_bar(self, task: Task) -> SafeString:
        return format_html(
            '<progress class="scylla-progress" value="{}" max="1">{}%</progress> '
            '<span class="scylla-age">{}%</span>',
            f"{task.progress:.3f}",
            round(task.progress * 100),
            round(task.progress * 100),
        )

    @admin.display(description="attempts in the chain")
    def chain(self, task: Task) -> SafeString | str:
        return chain_links(task)

    @admin.display(description="unique key")
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

    @admin.display(description="unique window")
    def unique_window_text(self, task: Task) -> str:
        return "-" if task.unique_window is None else format_duration(task.unique_window)

    @admin.display(description="owner")
    def owner_link(self, task: Task) -> SafeString | str:
        if not task.owner:
            return "-"
        return format_html('<a href="{}">{}</a>', changelist_url(owner=task.owner), task.owner)

    @admin.display(description="error")
    def error_code(self, task: Task) -> SafeString | str:
        code = getattr(task, "error_code", None)
        if not code:
            return "-"
        return format_html(
            '<a href="{}"><code>{}</code></a>', changelist_url(error_code=code), code
        )

    created_at = field_display("created", ago, ordering="id")
    updated_at = field_display("updated", ago)

    @admin.display(description="deadline")
    def deadline_at(self, task: Task) -> SafeString | str:
        if task.is_expired and task.deadline is not None:
            return format_html(
                '<span class="scylla-badge scylla-expired" title="{}, {}">expired</span>',
                timestamp(task.deadline),
                ago_words(task.deadline),
            )
        return ago(task.deadline)

    # -- the detail -------------------------------------------------------------------------

    created_time = field_display("created", moment)
    updated_time = field_display("updated", moment)

    @admin.display(description="deadline")
    def deadline_time(self, task: Task) -> SafeString | str:
        if task.is_expired:
            return format_html(
                '{} <span class="scylla-badge scylla-expired">expired</span>', moment(task.deadline)
            )
        return moment(task.deadline)

    @admin.display(description="not before")
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

    @admin.display(description="waits for")
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

    def get_fieldsets(self, request: HttpRequest, obj: Task | None = None) -> Any:
        """The task's fields; a waiting follow-up's parents among them."""
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or not followups.waits_for_parents(obj):
            return fieldsets
        (name, options), *rest = fieldsets
        return [(name, {**options, "fields": (*options["fields"], ("parents_list",))}), *rest]

    spec_json = field_display("spec", pretty_json)
    result_json = field_display("result", pretty_json)
    errors_table = field_display("errors", errors_table)

    @admin.display(description="history")
    def history_note(self, task: Task) -> str:
        count = History.objects.filter(task=task).count()
        if not count:
            return "No events yet: the task was never leased."
        if count > HISTORY_LIMIT:
            return f"{count:,} events; the latest {HISTORY_LIMIT} are shown below."
        return f"{plural(count, 'event')}, shown below."

    def get_formset_kwargs(
        self, request: HttpRequest, obj: Task, inline: Any, prefix: str
    ) -> dict[str, Any]:
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        if isinstance(inline, HistoryInline):
            latest = History.objects.filter(task=obj).order_by("-id").values_list("pk", flat=True)
            kwargs["queryset"] = kwargs["queryset"].filter(pk__in=list(latest[:HISTORY_LIMIT]))
        return kwargs

    # -- actions ----------------------------------------------------------------------------

    @admin.action(permissions=["cancel"], description="Cancel selected (ready/running only)")
    def cancel_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        """Cancel the selected ready and running tasks with `TaskQuerySet.cancel()`."""
        selected = queryset.order_by()
        total = selected.count()
        cancelled = selected.cancel()
        logger.info("%s cancelled %d of %d selected tasks", request.user, cancelled, total)
        self.message_user(
            request,
            f"{cancelled} cancelled, {total - cancelled} skipped (not ready or running).",
            messages.SUCCESS if cancelled else messages.WARNING,
        )

    @admin.action(permissions=["submit"], description="Retry selected (aborted/cancelled only)")
    def retry_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        """Resubmit the selected aborted and cancelled tasks with `Task.retry()`."""
        retry_tasks(self, request, queryset)

    @admin.action(permissions=["purge"], description="Purge selected (terminal only)")
    def purge_selected(
        self, request: HttpRequest, queryset: TaskQuerySet
    ) -> TemplateResponse | None:
        """Delete the selected terminal tasks, with their History, by `TaskQuerySet.purge()`.

        As Django's own delete action does, it first shows how many tasks would go and asks for
        a confirmation, which posts the same selection back with `post=yes`.
        """
        selected = queryset.order_by()
        total = selected.count()
        if request.POST.get("post") != "yes":
            return self.purge_selected_confirmation(request, selected, total)
        run = TimedPurge(self.purge_time_budget)
        # Whatever their age: here the selection, not the retention, says what goes.
        finished = run.run(lambda **kw: selected.purge(older_than=timedelta.resolution, **kw))
        logger.info("%s purged %d of %d selected tasks", request.user, run.deleted, total)
        if finished:
            self.message_user(
                request,
                f"{run.deleted} purged, {total - run.deleted} skipped (not terminal).",
                messages.SUCCESS if run.deleted else messages.WARNING,
            )
        else:
            self.message_user(
                request,
                f"{run.deleted} purged, then stopped after {short(run.seconds)}: run the action "
                "again for the rest.",
                messages.WARNING,
            )
        return None

    def purge_selected_confirmation(
        self, request: HttpRequest, selected: TaskQuerySet, total: int
    ) -> TemplateResponse:
        """The page that counts what "Purge selected" would delete, and asks to go on."""
        count = selected.filter(status__in=[s.value for s in TERMINAL_STATUSES]).count()
        context = {
            **self.page_context(request, "Purge selected tasks"),
            "count": count,
            "skipped": total - count,
            "batch_size": scylla_settings.PURGE_BATCH_SIZE,
            "selected": request.POST.getlist(ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across") == "1",
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "back_url": request.get_full_path(),
        }
        return TemplateResponse(request, "scylla_django/admin/purge_selected.html", context)

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
                f"No task has the id or rn “{key}”. Perhaps it was purged?",
                messages.WARNING,
            )
            return HttpResponseRedirect(reverse("admin:scylla_django_task_changelist"))
        if str(task.pk) != key:
            url = reverse(f"admin:scylla_django_task_{page}", args=[task.pk])
            query = request.GET.urlencode()
            return HttpResponseRedirect(f"{url}?{query}" if query else url)
        return task

    def buttons(self, task: Task) -> dict[str, Any]:
        """The task page's operations that apply to `task` now (one query for a running task)."""
        buttons: dict[str, Any] = {}
        if task.status in sources(Operation.CANCEL):
            buttons["scylla_cancel_url"] = reverse(
                "admin:scylla_django_task_cancel", args=[task.pk]
            )
        if task.status == Status.RUNNING and task.owner:
            pk = worker_id(task.owner)
            # An owner that is not a worker name, or no longer registered, counts as dead.
            state = Worker(pk=pk).current_state() if pk is not None else Liveness.DEAD.value
            if state != Liveness.ALIVE:
                buttons.update(
                    scylla_reset_url=reverse(
                        "admin:scylla_django_task_reset_lease", args=[task.pk]
                    ),
                    scylla_owner=task.owner,
                    scylla_owner_state=state,
                    scylla_lease=task.leases,
                )
        return buttons

    def operated_task(self, request: HttpRequest, pk: int) -> Task:
        """The task a button posts to, once the method and permission are checked."""
        if request.method != "POST":
            raise PermissionDenied
        if not self.has_cancel_permission(request):
            raise PermissionDenied
        task = Task.objects.filter(pk=pk).first()
        if task is None:
            raise Http404(f"No task has id {pk}.")
        return task

    def reset_lease_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST owner and lease: `Task.reset_lease(owner, lease)`, fenced on what the page
        showed. Refused (with a message) if the owner is alive again or the lease changed."""
        task = self.operated_task(request, pk)
        owner = request.POST.get("owner", "")
        lease = request.POST.get("lease", "")
        back = reverse("admin:scylla_django_task_change", args=[task.pk])
        if not owner or not lease.isdigit() or len(lease) > 9:
            self.message_user(request, "The reset needs the owner and lease shown.", messages.ERROR)
            return HttpResponseRedirect(back)
        try:
            task.reset_lease(owner, int(lease))
        except (OwnerAlive, LeaseLost, InvalidTransition, TaskNotFound) as exc:
            self.message_user(request, f"Lease not reset: {exc}", messages.ERROR)
            return HttpResponseRedirect(back)
        logger.info("%s reset the lease of %s held by %s", request.user, task.rn, owner)
        self.message_user(
            request, f"Lease reset: {task.rn} is ready again ({owner} lost it).", messages.SUCCESS
        )
        return HttpResponseRedirect(back)

    def cancel_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST: `Task.cancel()`; a task no longer ready or running is refused with a message."""
        task = self.operated_task(request, pk)
        back = reverse("admin:scylla_django_task_change", args=[task.pk])
        try:
            task.cancel()
        except (InvalidTransition, TaskNotFound) as exc:
            self.message_user(request, f"Not cancelled: {exc}", messages.ERROR)
            return HttpResponseRedirect(back)
        logger.info("%s cancelled %s", request.user, task.rn)
        self.message_user(request, f"Cancelled {task.rn}.", messages.SUCCESS)
        return HttpResponseRedirect(back)

    # -- queue control (the dashboard's queue rows) -----------------------------------------

    def has_queue_permission(self, request: HttpRequest) -> bool:
        """May pause and resume queues: `scylla_django.control_queue`."""
        return request.user.has_perm("scylla_django.control_queue")

    def queue_view(self, request: HttpRequest, queue: str, operation: str) -> HttpResponse:
        """POST: pause or resume `queue`, then back to the dashboard."""
        if request.method != "POST" or not self.has_queue_permission(request):
            raise PermissionDenied
        if operation not in {"pause", "resume"}:
            raise Http404(f"Unknown queue operation {operation!r}.")
        try:
            if operation == "pause":
                QueueSetting.objects.pause(queue)
            else:
                QueueSetting.objects.resume(queue)
        except ValidationError as exc:
            self.message_user(request, " ".join(exc.messages), messages.ERROR)
        else:
            logger.info("%s: %s queue %s", request.user, operation, queue)
            done = "paused: no task of it is leased" if operation == "pause" else "resumed"
            self.message_user(request, f"Queue {queue} {done}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:scylla_django_task_dashboard"))

    # -- dashboard and bulk purge pages ----------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(route, self.admin_site.admin_view(view), name=name)
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
                    "queues/<str:queue>/<str:operation>/",
                    self.queue_view,
                    "scylla_django_queue_control",
                ),
            )
        ]
        return [*own, *super().get_urls()]

    def page_context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        """The context every admin page needs, plus ours."""
        return {
            **self.admin_site.each_context(request),
            **self.console_links(request),
            "title": title,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            # Django < 6 renders the object-tools block inside the content block, which our
            # pages replace: they then render the tools themselves.
            "scylla_tools_in_content": django.VERSION < (6, 0),
        }

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """Counts per queue and status, throughput, expired leases, failures and live workers."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        refresh = request.GET.get("refresh", "10")
        context = {
            **self.page_context(request, "Scylla dashboard"),
            "dashboard": dashboard.build(),
            "charts": charts.build(request.GET.get("range")),
            "may_control_queues": self.has_queue_permission(request),
            "refresh": int(refresh) if refresh in {"0", "5", "10", "30", "60"} else 10,
        }
        return TemplateResponse(request, "scylla_django/admin/dashboard.html", context)

    def dashboard_charts_view(self, request: HttpRequest) -> JsonResponse:
        """The data of the dashboard's per-queue charts, as JSON: `?range=hour|day|week`."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        key = request.GET.get("range", charts.DEFAULT_RANGE)
        if key not in charts.RANGES:
            choices = ", ".join(charts.RANGES)
            return JsonResponse(
                {"code": "invalid_range", "detail": f"range is one of {choices}, not {key!r}."},
                status=400,
            )
        return JsonResponse(charts.build(key).as_json())

    def purge_view(self, request: HttpRequest) -> HttpResponse:
        """Bulk purge: choose (GET), see how many tasks match (GET), confirm and purge (POST)."""
        if not self.has_purge_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            form = PurgeForm(request.POST)
            if form.is_valid():
                return self.purge(request, form)
        elif any(name in request.GET for name in PurgeForm.base_fields):
            form = PurgeForm(request.GET)
        else:
            form = PurgeForm()
        count = None
        if request.method == "GET" and form.is_bound and form.is_valid():
            count = Task.objects.purgeable(**form.selection()).count()
        context = {
            **self.page_context(request, "Bulk purge"),
            "form": form,
            "count": count,
            "batch_size": scylla_settings.PURGE_BATCH_SIZE,
        }
        return TemplateResponse(
            request, "scylla_django/admin/purge.html", context, status=400 if form.errors else 200
        )

    def purge(self, request: HttpRequest, form: PurgeForm) -> HttpResponse:
        """Run the confirmed purge in batches, within `purge_time_budget`, and report."""
        selection = form.selection()
        run = TimedPurge(self.purge_time_budget)
        finished = run.run(lambda **kw: Task.objects.purge(**selection, **kw))
        logger.info(
            "%s purged %d tasks in %d batches (%s)",
            request.user,
            run.deleted,
            run.batches,
            form.description(),
        )
        remaining = 0 if finished else Task.objects.purgeable(**selection).count()
        if remaining:
            self.message_user(
                request,
                f"Purged {tasks(run.deleted)} in {short(run.seconds)}, then stopped; "
                f"{remaining:,} more match: purge again, or run manage.py scylla_cleanup.",
                messages.WARNING,
            )
        else:
            self.message_user(request, f"Purged {tasks(run.deleted)}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:scylla_django_task_changelist"))
