"""The admin console (SPEC §7): tasks and workers, two actions, a bulk purge page, a dashboard.

Read-only apart from explicit operations, each calling the same method as the API and the
commands: "Cancel selected" is `TaskQuerySet.cancel()`, "Purge selected" and the bulk purge page
are `TaskQuerySet.purge()`. Built to stay fast on millions of tasks:

- no full COUNT(*): `EstimatingPaginator` counts at most `COUNT_CAP` + 1 rows, and past that
  shows PostgreSQL's planner estimate ("about 765,000");
- the list is ordered by primary key, the insertion order (newest first, through the pk index);
- the search and the filters are exact matches; queue and owner are typed in (with
  suggestions from the live workers) rather than listed by a SELECT DISTINCT over every task;
- the list never loads `spec`, `result` or `errors` (up to a MiB each).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import django
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.core.validators import RegexValidator
from django.db import connections, models
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from . import dashboard
from .conf import scylla_settings
from .enums import Status
from .models import WORKER_PREFIX, History, Task, TaskQuerySet, Worker
from .validation import QUEUE_MAX_LENGTH, queue_validator, rn_validator

logger = logging.getLogger("scylla_django")

COUNT_CAP = 10_000
HISTORY_LIMIT = 200
PAYLOAD_PREVIEW = 10_000  # characters of pretty-printed JSON shown before "show all"
WORKER_NAME = re.compile(rf"\A{WORKER_PREFIX}[0-9]{{1,18}}\Z")
owner_validator = RegexValidator(
    r"\A[A-Za-z0-9._:-]{1,64}\Z", "Not a worker name.", code="invalid_owner"
)
CSS = "scylla_django/admin.css"

if TYPE_CHECKING:  # django-stubs makes these generic; Django's classes cannot be subscripted
    TaskAdminBase = admin.ModelAdmin[Task]
    WorkerAdminBase = admin.ModelAdmin[Worker]
    HistoryInlineBase = admin.TabularInline[History, Task]
    PaginatorBase = Paginator[Any]
else:
    TaskAdminBase = WorkerAdminBase = admin.ModelAdmin
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
    if connections[queryset.db].vendor != "postgresql":
        return queryset.count()
    plan = json.loads(queryset.order_by().explain(format="json"))
    return ApproximateCount(max(int(plan[0]["Plan"]["Plan Rows"]), COUNT_CAP + 1))


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


# -- display helpers -------------------------------------------------------------------------


def tasks(count: int) -> str:
    """`count` tasks, in words: "1 task", "1,200 tasks"."""
    return f"{count:,} task{'' if count == 1 else 's'}"


def timestamp(value: datetime) -> str:
    """`value` in the current time zone, to the second, with the zone's name."""
    return f"{timezone.localtime(value):%Y-%m-%d %H:%M:%S %Z}"


def moment(value: datetime | None) -> SafeString | str:
    """A timestamp with its age: "2026-11-22 14:02:11 UTC (3 min ago)"."""
    if value is None:
        return "-"
    return format_html(
        '<time datetime="{}">{}</time> <span class="scylla-age">({})</span>',
        value.isoformat(),
        timestamp(value),
        dashboard.age(value),
    )


def ago(value: datetime | None) -> SafeString | str:
    """An age for a list cell, "3 min ago", with the timestamp as its tooltip."""
    if value is None:
        return "-"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        timestamp(value),
        dashboard.age(value),
    )


def status_badge(status: str) -> SafeString:
    """A status as a coloured badge (the colours are in admin.css, for light and dark mode)."""
    return format_html('<span class="scylla-badge scylla-{}">{}</span>', status, status)


def pretty_json(value: Any) -> SafeString | str:
    """JSON indented in a <pre>; past `PAYLOAD_PREVIEW` characters the rest folds away."""
    if value is None:
        return "-"
    text = json.dumps(value, indent=2, ensure_ascii=False)
    if len(text) <= PAYLOAD_PREVIEW:
        return format_html('<pre class="scylla-json">{}</pre>', text)
    cut = text.rfind("\n", 0, PAYLOAD_PREVIEW)
    cut = cut if cut > 0 else PAYLOAD_PREVIEW
    head, rest = text[:cut], text[cut:].removeprefix("\n")
    return format_html(
        '<pre class="scylla-json">{}</pre><details class="scylla-more"><summary>'
        "Show all: {} more of {}</summary>"
        '<pre class="scylla-json">{}</pre></details>',
        head,
        filesizeformat(len(rest.encode())),
        filesizeformat(len(text.encode())),
        rest,
    )


def errors_table(errors: Any) -> SafeString | str:
    """A task's errors as a table of code, description and args."""
    if not errors:
        return "-"
    if not (isinstance(errors, list) and all(isinstance(e, dict) for e in errors)):
        return pretty_json(errors)
    rows = format_html_join(
        "",
        "<tr><td><code>{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
        (
            (
                error.get("code", ""),
                error.get("description", ""),
                Truncator(json.dumps(error.get("args", {}), ensure_ascii=False)).chars(300),
            )
            for error in errors
        ),
    )
    return format_html(
        '<table class="scylla-errors"><thead><tr><th>code</th><th>description</th>'
        "<th>args</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )


def can_view_tasks(request: HttpRequest) -> bool:
    """Whether the user may view tasks (view or change permission, as Django's admin has it)."""
    return request.user.has_perm("scylla_django.view_task") or request.user.has_perm(
        "scylla_django.change_task"
    )


def changelist_url(**params: str) -> str:
    """The task list, filtered by `params` (e.g. queue="q3", status="ready")."""
    return f"{reverse('admin:scylla_django_task_changelist')}?{urlencode(params)}"


# -- filters ---------------------------------------------------------------------------------


class StatusFilter(admin.SimpleListFilter):
    """`?status=`: one status, or `expired` (running past the lease deadline)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*((s.value, s.label) for s in Status), ("expired", "Running, lease expired")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if value == "expired":
            return queryset.filter(status=Status.RUNNING, deadline__lt=Now())
        if value not in Status.values:
            raise IncorrectLookupParameters(f"Unknown status {value!r}.")
        return queryset.filter(status=value)


class PriorityFilter(admin.SimpleListFilter):
    """`?priority=`: a range `low-high` (the listed bands) or one priority."""

    title = "priority"
    parameter_name = "priority"
    pattern = re.compile(r"\A([0-9]{1,3})(?:-([0-9]{1,3}))?\Z")

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("200-255", "200-255"),
            ("100-199", "100-199"),
            ("50-99", "50-99"),
            ("1-49", "1-49"),
            ("0", "0"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        match = self.pattern.match(value)
        if match is None:
            raise IncorrectLookupParameters(f"Not a priority or a range: {value!r}.")
        low = int(match[1])
        high = int(match[2]) if match[2] is not None else low
        if not 0 <= low <= high <= 255:
            raise IncorrectLookupParameters(f"Not a priority range within 0-255: {value!r}.")
        return queryset.filter(priority__gte=low, priority__lte=high)


class InputFilter(admin.SimpleListFilter):
    """An exact-match filter typed into a box, for a column with too many values to list.

    Subclasses set `parameter_name` (the field too), `validator`, and may offer
    `suggestions()` (shown in a <datalist>). A value the validator rejects is a bad lookup; an
    empty one (the box submitted empty) filters nothing.
    """

    template = "scylla_django/admin/input_filter.html"
    validator: Callable[[Any], Any]

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return []

    def has_output(self) -> bool:
        return True

    def suggestions(self) -> list[str]:
        """Values offered while typing."""
        return []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        try:
            type(self).validator(value)
        except ValidationError as exc:
            raise IncorrectLookupParameters(exc) from exc
        return queryset.filter(**{str(self.parameter_name): value})

    def choices(self, changelist: Any) -> Iterator[Any]:
        name = self.parameter_name
        yield {
            "name": name,
            "value": self.value() or "",
            "hidden": [(k, v) for k, v in changelist.params.items() if k != name],
            "clear_url": changelist.get_query_string(remove=[name]),
            "suggestions": self.suggestions(),
        }


class QueueFilter(InputFilter):
    """`?queue=`: one queue, by exact name."""

    title = "queue"
    parameter_name = "queue"
    validator = queue_validator

    def suggestions(self) -> list[str]:
        return dashboard.known_queues()


class OwnerFilter(InputFilter):
    """`?owner=`: the tasks a worker runs or ran, by its name."""

    title = "owner"
    parameter_name = "owner"
    validator = owner_validator

    def suggestions(self) -> list[str]:
        return dashboard.known_workers()


class DateRangeFilter(admin.FieldListFilter):
    """`?<field>__gte=&<field>__lt=`: a time range typed in, with quick ranges to pick.

    Values are ISO dates or datetimes; one without a time zone is read in the current one.
    """

    template = "scylla_django/admin/date_range_filter.html"
    presets = (
        ("Past hour", timedelta(hours=1)),
        ("Past 24 hours", timedelta(days=1)),
        ("Past 7 days", timedelta(days=7)),
    )

    def __init__(
        self,
        field: models.Field[Any, Any],
        request: HttpRequest,
        params: dict[str, list[str]],
        model: type[models.Model],
        model_admin: admin.ModelAdmin[Any],
        field_path: str,
    ) -> None:
        self.since_param = f"{field_path}__gte"
        self.until_param = f"{field_path}__lt"
        super().__init__(field, request, params, model, model_admin, field_path)

    def expected_parameters(self) -> list[str | None]:
        return [self.since_param, self.until_param]

    def bound(self, param: str) -> datetime | None:
        """The parsed value of `param`, or None; IncorrectLookupParameters if it is not a time."""
        values = self.used_parameters.get(param)
        text = str(values[-1] if isinstance(values, list) else values or "").strip()
        if not text:
            return None
        try:
            moment_ = parse_datetime(text)
            if moment_ is None:
                day = parse_date(text)
                if day is None:
                    raise ValueError(text)
                moment_ = datetime(day.year, day.month, day.day)
        except ValueError as exc:
            raise IncorrectLookupParameters(f"Not a date or time: {text!r}.") from exc
        if not settings.USE_TZ:
            return timezone.make_naive(moment_) if timezone.is_aware(moment_) else moment_
        if timezone.is_naive(moment_):
            moment_ = timezone.make_aware(moment_)
        try:  # the database stores UTC: year 1 east of Greenwich is out of range
            return moment_.astimezone(UTC)
        except OverflowError as exc:
            raise IncorrectLookupParameters(f"Out of range: {text!r}.") from exc

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        for param in (self.since_param, self.until_param):
            value = self.bound(param)
            if value is not None:
                queryset = queryset.filter(**{param: value})
        return queryset

    def choices(self, changelist: Any) -> Iterator[Any]:
        since, until = self.bound(self.since_param), self.bound(self.until_param)
        ours = (self.since_param, self.until_param)
        now = timezone.now()
        yield {
            "any_url": changelist.get_query_string(remove=list(ours)),
            "active": since is not None or until is not None,
            "presets": [
                (
                    label,
                    changelist.get_query_string(
                        {self.since_param: self.as_input(now - delta)}, [self.until_param]
                    ),
                )
                for label, delta in self.presets
            ],
            "hidden": [(k, v) for k, v in changelist.params.items() if k not in ours],
            "since_param": self.since_param,
            "until_param": self.until_param,
            "since": self.as_input(since),
            "until": self.as_input(until),
        }

    @staticmethod
    def as_input(value: datetime | None) -> str:
        """`value` as a datetime-local input wants it: local time, to the minute."""
        if value is None:
            return ""
        local = timezone.localtime(value) if timezone.is_aware(value) else value
        return f"{local:%Y-%m-%dT%H:%M}"


# -- tasks -----------------------------------------------------------------------------------


class HistoryInline(HistoryInlineBase):
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

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="_typ")
    def event(self, entry: History) -> str:
        return entry.typ

    @admin.display(description="time")
    def when(self, entry: History) -> SafeString | str:
        return moment(entry.time)


class TaskChangeList(ChangeList):
    """The task list's ChangeList: leaves out the JSON payloads, sorts only on indexes."""

    def get_queryset(
        self, request: HttpRequest, exclude_parameters: list[str | None] | None = None
    ) -> QuerySet[Any]:
        return super().get_queryset(request, exclude_parameters).defer("spec", "result", "errors")

    def get_ordering_field(self, field_name: Any) -> Any:
        """Only `sortable_by` columns sort, whatever `?o=` says: others would sort every row."""
        if self.sortable_by is not None and field_name not in self.sortable_by:
            return None
        return super().get_ordering_field(field_name)


class PurgeForm(forms.Form):
    """The bulk purge: terminal tasks not updated for N days, by status and optionally queue."""

    older_than_days = forms.IntegerField(
        label="Not updated for (days)",
        min_value=1,
        max_value=36_500,
        help_text="Tasks whose last change is older than this many days.",
    )
    statuses = forms.MultipleChoiceField(
        choices=[(s.value, s.label) for s in dashboard.FINISHED],
        widget=forms.CheckboxSelectMultiple,
        help_text="Only terminal tasks can be purged; ready and running tasks never are.",
    )
    queue = forms.CharField(
        required=False,
        max_length=QUEUE_MAX_LENGTH,
        validators=[queue_validator],
        help_text="One queue by its exact name, or empty for every queue.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault(
            "initial",
            {
                "older_than_days": max(1, scylla_settings.RETENTION.days),
                "statuses": [s.value for s in dashboard.FINISHED],
            },
        )
        super().__init__(*args, **kwargs)

    def description(self) -> str:
        """The selection in words: "completed or aborted, not updated for 10 days, any queue"."""
        statuses = " or ".join(self.cleaned_data["statuses"])
        days = self.cleaned_data["older_than_days"]
        queue = self.cleaned_data["queue"]
        where = f"queue {queue}" if queue else "any queue"
        return f"{statuses}, not updated for {days} day{'' if days == 1 else 's'}, {where}"

    def selection(self) -> dict[str, Any]:
        """The arguments of `purgeable()` and `purge()` (the form must be valid)."""
        return {
            "older_than": timedelta(days=self.cleaned_data["older_than_days"]),
            "statuses": self.cleaned_data["statuses"],
            "queue": self.cleaned_data["queue"] or None,
        }


class _OutOfTime(Exception):
    """Raised from a purge's `on_batch` to stop it between two committed batches."""


class TimedPurge:
    """Runs a batched purge until it is done or `budget` has passed, counting what it deleted."""

    def __init__(self, budget: timedelta) -> None:
        self.budget = budget
        self.deleted = 0
        self.batches = 0
        self.started = time.monotonic()

    def on_batch(self, count: int) -> None:
        """`purge()`'s callback, after each committed batch: count it, stop when out of time."""
        self.deleted += count
        self.batches += 1
        if time.monotonic() - self.started >= self.budget.total_seconds():
            raise _OutOfTime

    def run(self, purge: Callable[..., int]) -> bool:
        """Call `purge(on_batch=…)`; True if it finished, False if it was stopped."""
        try:
            purge(on_batch=self.on_batch)
        except _OutOfTime:
            return False
        return True

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


@admin.register(Task)
class TaskAdmin(TaskAdminBase):
    """Tasks: a list built for millions of rows, a read-only detail, cancel and purge."""

    list_display = (
        "rn",
        "queue_link",
        "status_badge",
        "priority",
        "progress_bar",
        "owner_link",
        "attempts",
        "created_at",
        "updated_at",
        "deadline_at",
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
        ("created", DateRangeFilter),
        ("updated", DateRangeFilter),
    )
    search_fields = ("rn", "queue", "owner")
    search_help_text = (
        "An exact rn, queue or worker name (worker-<n>); every word given must match."
    )
    ordering = ("-id",)
    change_list_template = "scylla_django/admin/change_list.html"
    list_per_page = 100
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatingPaginator
    actions = ("cancel_selected", "purge_selected")
    inlines = (HistoryInline,)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("rn", "queue"),
                    ("status_badge", "priority", "progress_bar"),
                    ("owner_link", "attempts", "deadline_time"),
                    ("created_time", "updated_time", "not_before_at"),
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
    )
    # About 500,000 tasks a request at the 25,000/s measured (docs/admin.md); for more, there
    # is scylla_cleanup.
    purge_time_budget = timedelta(seconds=20)

    class Media:
        css = {"all": (CSS,)}

    # -- permissions: read-only apart from the two operations -------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        # No delete view or button, and so no delete_selected action: it loads every row it
        # deletes. Terminal tasks go through purge_selected and the bulk purge page instead.
        return False

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """May cancel tasks: `scylla_django.cancel_task`."""
        return request.user.has_perm("scylla_django.cancel_task")

    def has_purge_permission(self, request: HttpRequest) -> bool:
        """May delete terminal tasks: `scylla_django.delete_task`."""
        return request.user.has_perm("scylla_django.delete_task")

    # -- the list ---------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return TaskChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Each word must equal the rn, the queue or (for `worker-<n>`) the owner.

        Equality, never LIKE: rn and queue are then answered by their indexes. owner has no
        index, so it is tried only for words that are worker names; a word that cannot be any
        of the three (e.g. one holding a character no name may hold) matches nothing.
        """
        for term in search_term.split():
            match = Q()
            for field, validator in (("rn", rn_validator), ("queue", queue_validator)):
                try:
                    validator(term)
                except ValidationError:
                    continue
                match |= Q(**{field: term})
            if WORKER_NAME.match(term):
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

    @admin.display(description="owner")
    def owner_link(self, task: Task) -> SafeString | str:
        if not task.owner:
            return "-"
        return format_html('<a href="{}">{}</a>', changelist_url(owner=task.owner), task.owner)

    @admin.display(description="created", ordering="id")
    def created_at(self, task: Task) -> SafeString | str:
        return ago(task.created)

    @admin.display(description="updated")
    def updated_at(self, task: Task) -> SafeString | str:
        return ago(task.updated)

    @admin.display(description="deadline")
    def deadline_at(self, task: Task) -> SafeString | str:
        if task.is_expired and task.deadline is not None:
            return format_html(
                '<span class="scylla-badge scylla-expired" title="{}, {}">expired</span>',
                timestamp(task.deadline),
                dashboard.age(task.deadline),
            )
        return ago(task.deadline)

    # -- the detail -------------------------------------------------------------------------

    @admin.display(description="created")
    def created_time(self, task: Task) -> SafeString | str:
        return moment(task.created)

    @admin.display(description="updated")
    def updated_time(self, task: Task) -> SafeString | str:
        return moment(task.updated)

    @admin.display(description="deadline")
    def deadline_time(self, task: Task) -> SafeString | str:
        if task.is_expired:
            return format_html(
                '{} <span class="scylla-badge scylla-expired">expired</span>', moment(task.deadline)
            )
        return moment(task.deadline)

    @admin.display(description="not before")
    def not_before_at(self, task: Task) -> SafeString | str:
        return moment(task.not_before)

    @admin.display(description="spec")
    def spec_json(self, task: Task) -> SafeString | str:
        return pretty_json(task.spec)

    @admin.display(description="result")
    def result_json(self, task: Task) -> SafeString | str:
        return pretty_json(task.result)

    @admin.display(description="errors")
    def errors_table(self, task: Task) -> SafeString | str:
        return errors_table(task.errors)

    @admin.display(description="history")
    def history_note(self, task: Task) -> str:
        count = History.objects.filter(task=task).count()
        if count > HISTORY_LIMIT:
            return f"{count:,} events; the latest {HISTORY_LIMIT} are shown below."
        return f"{count} event{'' if count == 1 else 's'}, shown below."

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

    @admin.action(permissions=["purge"], description="Purge selected (terminal only)")
    def purge_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        """Delete the selected terminal tasks, with their History, by `TaskQuerySet.purge()`."""
        selected = queryset.order_by()
        total = selected.count()
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
                f"{run.deleted} purged, then stopped after {run.seconds:.0f} s: run the action "
                "again for the rest.",
                messages.WARNING,
            )

    # -- dashboard and bulk purge pages ----------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "dashboard/",
                self.admin_site.admin_view(self.dashboard_view),
                name="scylla_django_task_dashboard",
            ),
            path(
                "purge/",
                self.admin_site.admin_view(self.purge_view),
                name="scylla_django_task_purge",
            ),
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
            "refresh": int(refresh) if refresh in {"0", "5", "10", "30", "60"} else 10,
        }
        return TemplateResponse(request, "scylla_django/admin/dashboard.html", context)

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
                f"Purged {tasks(run.deleted)} in {run.seconds:.0f} s, then stopped; "
                f"{remaining:,} more match: purge again, or run manage.py scylla_cleanup.",
                messages.WARNING,
            )
        else:
            self.message_user(request, f"Purged {tasks(run.deleted)}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:scylla_django_task_changelist"))


# -- workers ---------------------------------------------------------------------------------


class WorkerStateFilter(admin.SimpleListFilter):
    """`?state=alive|silent|stopped`."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("alive", "alive"), ("silent", "silent"), ("stopped", "stopped")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        alive = Worker.objects.alive(dashboard.worker_silence())
        if value == "alive":
            return queryset & alive
        if value == "silent":
            return queryset.filter(stopped__isnull=True).exclude(pk__in=alive.values("pk"))
        if value == "stopped":
            return queryset.filter(stopped__isnull=False)
        raise IncorrectLookupParameters(f"Unknown state {value!r}.")


class WorkerChangeList(ChangeList):
    """The worker list's ChangeList: counts the page's running tasks in one query."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        running = dashboard.running_counts(worker.name for worker in self.result_list)
        for worker in self.result_list:
            worker.running_tasks = running.get(worker.name, 0)


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
            if WORKER_NAME.match(term):
                queryset = queryset.filter(pk=int(term.removeprefix(WORKER_PREFIX)))
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
        if worker.last_seen < timezone.now() - dashboard.worker_silence():
            return status_badge("silent")
        return status_badge("alive")

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


# The dashboard's row on the admin index, unless the project has its own index template.
if admin.site.index_template is None:
    admin.site.index_template = "scylla_django/admin/index.html"
