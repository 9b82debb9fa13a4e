"""The list filters of the task and worker pages: exact matches that indexes can answer."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..db import Now
from ..enums import Liveness, Status
from ..models import Consumption, TaskQuerySet, Worker
from ..models.keys import naming
from ..schedules import events
from ..validation import key_name, queue_validator, validate_unique_key
from .dashboard import workers as live_workers
from .databases import DatabaseFilter

# An error code as `validate_errors` accepts it: 1 to 200 characters, not all blank, no NUL.
error_code_validator = RegexValidator(
    r"\A(?=[^\x00]*\S)[^\x00]{1,200}\Z", "Not an error code.", code="invalid_error_code"
)
owner_validator = RegexValidator(
    r"\A[A-Za-z0-9._:-]{1,64}\Z", "Not a worker name.", code="invalid_owner"
)


class StatusFilter(admin.SimpleListFilter):
    """`?status=`: one status, or `expired` (running past the lease deadline)."""

    title = gettext_lazy("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*((s.value, s.label) for s in Status), ("expired", _("Running, lease expired"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if value == "expired":
            if not isinstance(queryset, TaskQuerySet):
                raise TypeError("StatusFilter filters tasks")
            return queryset.expired()
        if value not in Status.values:
            raise IncorrectLookupParameters(f"Unknown status {value!r}.")
        return queryset.filter(status=value)


class PriorityFilter(admin.SimpleListFilter):
    """`?priority=`: a range `low-high` (the listed bands) or one priority."""

    title = gettext_lazy("priority")
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


def input_filter(
    field: str, validator: Callable[[Any], Any], suggestions: Callable[[], list[str]], doc: str
) -> type[InputFilter]:
    """An `InputFilter` on `field` (its title and parameter too), suggesting `suggestions()`."""
    return type(
        f"{field.title()}Filter",
        (InputFilter,),
        {
            "__doc__": doc,
            "__module__": __name__,
            "title": field,
            "parameter_name": field,
            "validator": validator,
            "suggestions": lambda self: suggestions(),
        },
    )


QueueFilter = input_filter(
    "queue", queue_validator, live_workers.known_queues, "`?queue=`: one queue, by exact name."
)
OwnerFilter = input_filter(
    "owner",
    owner_validator,
    live_workers.known_workers,
    "`?owner=`: the tasks a worker runs or ran, by its name.",
)


KindFilter = input_filter(
    "kind", events.validate_kind, list, "`?kind=`: the events of one kind, by exact name."
)


class ConsumedFilter(admin.SimpleListFilter):
    """`?consumed=yes|no`: the events some schedule's firing consumed, or those none did."""

    title = gettext_lazy("consumed")
    parameter_name = "consumed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", gettext_lazy("by a schedule")), ("no", gettext_lazy("by none"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        consumed = models.Exists(Consumption.objects.filter(event=models.OuterRef("pk")))
        if self.value() == "yes":
            return queryset.filter(consumed)
        if self.value() == "no":
            return queryset.filter(~consumed)
        return queryset


class DateRangeFilter(admin.FieldListFilter):
    """`?<field>__gte=&<field>__lt=`: a time range typed in, with quick ranges to pick.

    Values are ISO dates or datetimes; one without a time zone is read in the current one.
    """

    template = "scylla_django/admin/date_range_filter.html"
    presets = (
        (gettext_lazy("Past hour"), timedelta(hours=1)),
        (gettext_lazy("Past 24 hours"), timedelta(days=1)),
        (gettext_lazy("Past 7 days"), timedelta(days=7)),
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


class WorkerStateFilter(admin.SimpleListFilter):
    """`?state=alive|silent|dead|stopped`, on the database clock (see `Liveness`)."""

    title = gettext_lazy("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state.value, state.label.lower()) for state in Liveness]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if value not in Liveness.values:
            raise IncorrectLookupParameters(f"Unknown state {value!r}.")
        return queryset.filter(Worker.objects.state_q(Liveness(value)))


UniqueKeyFilter = input_filter(
    "unique_key",
    validate_unique_key,
    list,
    "`?unique_key=`: the tasks submitted with this unique key, by exact key.",
)


class KeyFilter(InputFilter):
    """`?key=`: the tasks that name this key in any way: a lock (either mode), a limit, an
    order key, a rate or a unique key (`keys.naming`)."""

    title = "key"
    parameter_name = "key"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        try:
            key_name(value, "key")
        except ValidationError as exc:
            raise IncorrectLookupParameters(exc) from exc
        return naming(queryset, value)


class ErrorCodeFilter(InputFilter):
    """`?error_code=`: tasks that recorded an error with this code (in any of their errors)."""

    title = gettext_lazy("error code")
    parameter_name = "error_code"
    validator = error_code_validator

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        try:
            error_code_validator(value)
        except ValidationError as exc:
            raise IncorrectLookupParameters(exc) from exc
        if not isinstance(queryset, TaskQuerySet):
            raise TypeError("ErrorCodeFilter filters tasks")
        return queryset.with_error_code(value)


class DeadFilter(admin.SimpleListFilter):
    """`?dead=`: dead letters (aborted tasks given up), all of them or those given up longer
    ago than a day or a week; through the dead letters' own index."""

    title = "dead letter"
    parameter_name = "dead"
    ages: ClassVar[dict[str, timedelta]] = {"1d": timedelta(days=1), "7d": timedelta(days=7)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("yes", "Dead letters"),
            ("1d", "Dead for over a day"),
            ("7d", "Dead for over a week"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if not isinstance(queryset, TaskQuerySet):
            raise TypeError("DeadFilter filters tasks")
        if value == "yes":
            return queryset.dead()
        if value in self.ages:
            return queryset.dead().filter(dead__lt=Now() - self.ages[value])
        raise IncorrectLookupParameters(f"dead: {value!r} is not one of yes, 1d, 7d.")


def _batch_id(value: str) -> None:
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise ValidationError("A batch is named by its id, a whole number.", code="invalid")


BatchFilter = input_filter(
    "batch", _batch_id, list, "`?batch=`: the tasks of one batch, by its id."
)


class SubmitterFilter(admin.SimpleListFilter):
    """`?submitted=`: the tasks the signed-in user submitted ("my tasks"), or the system's
    (no user recorded)."""

    title = "submitted by"
    parameter_name = "submitted"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("me", "Me"), ("system", "The system")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if value == "me":
            return queryset.filter(origin__user=request.user.pk)
        if value == "system":
            return queryset.filter(Q(origin__isnull=True) | Q(origin__kind="system"))
        raise IncorrectLookupParameters(f"submitted: {value!r} is not one of me, system.")


TASK_FILTERS: tuple[Any, ...] = (
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
"""The task list's filters, in the order its sidebar shows them."""
