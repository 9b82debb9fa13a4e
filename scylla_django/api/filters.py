"""The filters of `GET /tasks/`, `GET /workers/` and `GET /events/` (docs/howto/http-api.md), as
django-filter FilterSets.

Every value is checked before it reaches the database: a queue or rn that breaks the naming
rules, a NUL character or an integer out of range is a 400 with a code per parameter, never a
server error, and a timestamp beyond what UTC can express is clamped to the nearest one that
it can. Ordering and paging are the pagination's (`pagination.TaskCursorPagination`).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import django_filters  # type: ignore[import-untyped, unused-ignore]
from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db.models import Exists, OuterRef, Q
from django.http import QueryDict
from django.utils.translation import gettext as _
from django_filters.rest_framework import DjangoFilterBackend  # type: ignore[import-untyped, unused-ignore]
from drf_spectacular.utils import extend_schema_field
from rest_framework.exceptions import ErrorDetail
from rest_framework.exceptions import ValidationError as APIValidationError

from ..enums import Liveness, Status
from ..models import Consumption, Event, Task, Worker, WorkerQuerySet
from ..models.events import KIND_MAX_LENGTH
from ..models.keys import naming
from ..schedules import events
from ..validation import (
    KEY_NAME_MAX_LENGTH,
    QUEUE_MAX_LENGTH,
    RN_MAX_LENGTH,
    queue_validator,
    rn_validator,
    schedule_name_validator,
)
from .serializers.base import clamp_utc


def string_schema(validator: RegexValidator, max_length: int, description: str) -> dict[str, Any]:
    """The OpenAPI schema of a string parameter checked by `validator`."""
    pattern = re.compile(validator.regex).pattern.replace("\\A", "^").replace("\\Z", "$")
    return {
        "type": "string",
        "pattern": pattern,
        "maxLength": max_length,
        "description": description,
    }


class UTCDateTimeField(django_filters.fields.IsoDateTimeField):  # type: ignore[misc, unused-ignore]
    """An ISO 8601 timestamp, in UTC (see `serializers.clamp_utc`)."""

    def to_python(self, value: Any) -> datetime | None:
        parsed: datetime | None = super().to_python(value)
        return None if parsed is None else clamp_utc(parsed)


class FilterBackend(DjangoFilterBackend):  # type: ignore[misc, unused-ignore]
    """django-filter's backend, whose refusals read as the API's other 400s: each parameter's
    messages as Django formats them, with their codes. (django-filter's own translation
    formats each message once more, and a refused value that holds a `%` made that a 500.)"""

    def filter_queryset(self, request: Any, queryset: Any, view: Any) -> Any:
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        if not filterset.is_valid():
            raise APIValidationError(
                {
                    name: [ErrorDetail(e["message"], code=e["code"]) for e in errors]
                    for name, errors in filterset.form.errors.get_json_data().items()
                }
            )
        return filterset.qs


class TimestampFilter(django_filters.IsoDateTimeFilter):  # type: ignore[misc, unused-ignore]
    """A bound on `created` or `updated`, in UTC."""

    field_class = UTCDateTimeField


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 255})
class PriorityFilter(django_filters.Filter):  # type: ignore[misc, unused-ignore]
    """A priority bound, 0..255 (an integer: `1.5` and `1e9` are refused)."""

    field_class = forms.IntegerField

    def __init__(self, lookup_expr: str) -> None:
        super().__init__(field_name="priority", lookup_expr=lookup_expr, min_value=0, max_value=255)


@extend_schema_field(string_schema(queue_validator, QUEUE_MAX_LENGTH, "Exact queue name."))
class QueueFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """A queue name, matched exactly."""

    def __init__(self) -> None:
        super().__init__(max_length=QUEUE_MAX_LENGTH, validators=[queue_validator])


@extend_schema_field(string_schema(rn_validator, RN_MAX_LENGTH, "Exact rn."))
class RnFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """An rn, matched exactly."""

    def __init__(self) -> None:
        super().__init__(max_length=RN_MAX_LENGTH, validators=[rn_validator])


@extend_schema_field(
    string_schema(rn_validator, RN_MAX_LENGTH, "A retry chain: the rn of its first task.")
)
class RootFilter(RnFilter):
    """The tasks of one retry chain: its first task (this rn) and every retry of it."""

    def filter(self, qs: Any, value: Any) -> Any:
        if value in ("", None):
            return qs
        return qs.in_chain(value)


@extend_schema_field(string_schema(rn_validator, RN_MAX_LENGTH, "The rn of a parent task."))
class ParentFilter(RnFilter):
    """The children of one task: the tasks it spawned (`ctx.spawn`)."""


class NoEmptyValuesForm(forms.Form):
    """Refuses a parameter given empty (`?queue=`): the schema allows no empty value, and
    ignoring it would hide a client's bug.
    """

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        for name in self.fields:
            if isinstance(self.data, QueryDict) and "" in self.data.getlist(name):
                self.add_error(
                    name, ValidationError(_("This parameter may not be empty."), "blank")
                )
        return cleaned


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": 64, "description": "Worker name (`worker-7`)."}
)
class OwnerFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """The worker that holds or held a task, matched exactly."""

    def __init__(self) -> None:
        super().__init__(max_length=64)


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": 100,
        "description": "Tasks that recorded an error with this code (exact).",
    }
)
class ErrorCodeFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """An error code, matched exactly against every error a task recorded."""

    def __init__(self) -> None:
        super().__init__(method="filter_error_code", max_length=100)


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": 150,
        "description": "The tasks submitted by the user with this username.",
    }
)
class SubmitterFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """The username of the user who submitted a task, matched exactly."""

    def __init__(self) -> None:
        super().__init__(field_name="origin__user__username", max_length=150)


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": KEY_NAME_MAX_LENGTH,
        "description": "The tasks counted against this admission key.",
    }
)
class AdmissionKeyFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """The admission key a task was counted against, matched exactly."""

    def __init__(self) -> None:
        super().__init__(field_name="origin__admission_key", max_length=KEY_NAME_MAX_LENGTH)


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": KEY_NAME_MAX_LENGTH,
        "description": "Tasks that name this key: a lock, limit, order key, rate or unique key.",
    }
)
class KeyFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """A key's name, matched exactly against every key a task names (`keys.naming`)."""

    def __init__(self) -> None:
        super().__init__(method="filter_key", max_length=KEY_NAME_MAX_LENGTH)


class TaskFilter(django_filters.FilterSet):  # type: ignore[misc, unused-ignore]
    """`status` (repeatable), `queue`, `owner`, `rn`, `root`, `parent`, priority and
    created/updated ranges, dead letters (`dead`, `dead_before`)."""

    status = django_filters.MultipleChoiceFilter(
        choices=Status.choices,
        distinct=False,  # a plain `status IN (…)`: no join can repeat a row
        help_text="One or more statuses (repeat the parameter).",
    )
    queue = QueueFilter()
    owner = OwnerFilter()
    rn = RnFilter()
    root = RootFilter()
    parent = ParentFilter()
    priority_min = PriorityFilter("gte")
    priority_max = PriorityFilter("lte")
    created_after = TimestampFilter(field_name="created", lookup_expr="gte")
    created_before = TimestampFilter(field_name="created", lookup_expr="lt")
    updated_after = TimestampFilter(field_name="updated", lookup_expr="gte")
    updated_before = TimestampFilter(field_name="updated", lookup_expr="lt")
    error_code = ErrorCodeFilter()
    key = KeyFilter()
    dead = django_filters.ChoiceFilter(
        choices=[("true", "true"), ("false", "false")],
        method="filter_dead",
        help_text="`true`: dead letters only (aborted tasks given up); `false`: no dead letter.",
    )
    dead_before = TimestampFilter(
        field_name="dead", lookup_expr="lt", help_text="Dead letters given up before this time."
    )
    mine = django_filters.ChoiceFilter(
        choices=[("true", "true"), ("false", "false")],
        method="filter_mine",
        help_text="`true`: the tasks the requesting user submitted; `false`: the others.",
    )
    submitter = SubmitterFilter()
    admission_key = AdmissionKeyFilter()

    class Meta:
        model = Task
        form = NoEmptyValuesForm
        fields = [
            "status",
            "queue",
            "owner",
            "rn",
            "root",
            "parent",
            "priority_min",
            "priority_max",
            "created_after",
            "created_before",
            "updated_after",
            "updated_before",
            "error_code",
            "key",
            "dead",
            "dead_before",
            "mine",
            "submitter",
            "admission_key",
        ]

    def filter_mine(self, queryset: Any, name: str, value: str) -> Any:
        user = getattr(getattr(self, "request", None), "user", None)
        mine = Q(origin__user=user.pk) if user is not None and user.is_authenticated else Q(pk=None)
        return queryset.filter(mine) if value == "true" else queryset.exclude(mine)

    def filter_dead(self, queryset: Any, name: str, value: str) -> Any:
        return queryset.dead() if value == "true" else queryset.filter(dead__isnull=True)

    def filter_error_code(self, queryset: Any, name: str, value: str) -> Any:
        return queryset.with_error_code(value)

    def filter_key(self, queryset: Any, name: str, value: str) -> Any:
        return naming(queryset, value)


class WorkerFilter(django_filters.FilterSet):  # type: ignore[misc, unused-ignore]
    """`state` (repeatable: alive, silent, dead, stopped) and `queue` (one the worker serves)."""

    state = django_filters.MultipleChoiceFilter(
        choices=Liveness.choices,
        method="filter_state",
        help_text="One or more states (repeat the parameter).",
    )
    queue = QueueFilter()

    class Meta:
        model = Worker
        form = NoEmptyValuesForm
        fields = ["state", "queue"]

    def filter_state(self, queryset: WorkerQuerySet, name: str, value: list[str]) -> Any:
        return queryset.in_state(*value) if value else queryset

    def filter_queryset(self, queryset: Any) -> Any:
        queue = self.form.cleaned_data.pop("queue", None)
        queryset = super().filter_queryset(queryset)
        return queryset.serving(queue) if queue else queryset


@extend_schema_field(
    {
        "type": "string",
        "pattern": events.KIND_PATTERN,
        "maxLength": KIND_MAX_LENGTH,
        "description": "Exact event kind (`partition.added`, `task.completed`).",
    }
)
class KindFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """An event kind, matched exactly; a malformed one is refused (`invalid_kind`)."""

    def __init__(self) -> None:
        super().__init__(max_length=KIND_MAX_LENGTH, validators=[events.validate_kind])


@extend_schema_field(
    string_schema(
        schedule_name_validator, 100, "Events consumed by the firings of this schedule (name)."
    )
)
class ConsumerFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """The events a schedule's firings consumed, by the schedule's name."""

    def __init__(self) -> None:
        super().__init__(
            method="filter_schedule", max_length=100, validators=[schedule_name_validator]
        )


class EventFilter(django_filters.FilterSet):  # type: ignore[misc, unused-ignore]
    """`kind` (exact), `since` (inclusive) and `until` (exclusive) on the event's time,
    `consumed` (by any schedule's firing, or by none) and `schedule` (consumed by its firings)."""

    kind = KindFilter()
    since = TimestampFilter(
        field_name="time", lookup_expr="gte", help_text="Events written at or after this time."
    )
    until = TimestampFilter(
        field_name="time", lookup_expr="lt", help_text="Events written before this time."
    )
    consumed = django_filters.ChoiceFilter(
        choices=[("true", "true"), ("false", "false")],
        method="filter_consumed",
        help_text="`true`: events some schedule's firing consumed; `false`: events none did.",
    )
    schedule = ConsumerFilter()

    class Meta:
        model = Event
        form = NoEmptyValuesForm
        fields = ["kind", "since", "until", "consumed", "schedule"]

    def filter_consumed(self, queryset: Any, name: str, value: str) -> Any:
        consumed = Exists(Consumption.objects.filter(event=OuterRef("pk")))
        return queryset.filter(consumed if value == "true" else ~consumed)

    def filter_schedule(self, queryset: Any, name: str, value: str) -> Any:
        return queryset.filter(
            Exists(Consumption.objects.filter(event=OuterRef("pk"), schedule__name=value))
        )


# -- the same filters in a request body (`POST /bulk/tasks/cancel/`) ---------------------------

RN_SCHEMA = string_schema(rn_validator, RN_MAX_LENGTH, "Exact rn.")
TIMESTAMP_SCHEMA = {"type": "string", "format": "date-time"}
PRIORITY_SCHEMA = {"type": "integer", "minimum": 0, "maximum": 255}
FILTER_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The filters of `GET /tasks/`, as a JSON object; at least one.",
    "properties": {
        "status": {
            "type": "array",
            "items": {"type": "string", "enum": list(Status.values)},
            "minItems": 1,
        },
        "queue": string_schema(queue_validator, QUEUE_MAX_LENGTH, "Exact queue name."),
        "owner": {"type": "string", "minLength": 1, "maxLength": 64},
        "rn": RN_SCHEMA,
        "parent": string_schema(rn_validator, RN_MAX_LENGTH, "The rn of a parent task."),
        "priority_min": PRIORITY_SCHEMA,
        "priority_max": PRIORITY_SCHEMA,
        "created_after": TIMESTAMP_SCHEMA,
        "created_before": TIMESTAMP_SCHEMA,
        "updated_after": TIMESTAMP_SCHEMA,
        "updated_before": TIMESTAMP_SCHEMA,
        "error_code": {"type": "string", "minLength": 1, "maxLength": 100},
        "key": {"type": "string", "minLength": 1, "maxLength": KEY_NAME_MAX_LENGTH},
        "dead": {"type": "string", "enum": ["true", "false"]},
        "dead_before": TIMESTAMP_SCHEMA,
    },
    "additionalProperties": False,
    "minProperties": 1,
}


def filter_from_body(data: Any, queryset: Any) -> Any:
    """The tasks of `queryset` that the filters in `data` (a JSON object) select.

    The values are checked by `TaskFilter`, as the list's query parameters are; a JSON
    string, integer or (for `status`) list of strings stands for the parameter's value(s).
    Raises a DRF ValidationError whose fields are named `filter.<name>`.
    """

    def invalid(name: str, message: str, code: str) -> APIValidationError:
        field = f"filter.{name}" if name else "filter"
        return APIValidationError({field: [ErrorDetail(message, code=code)]})

    if not isinstance(data, dict):
        raise invalid("", _("Send the filters as a JSON object."), "invalid")
    if not data:
        raise invalid(
            "", _("Give at least one filter (to cancel every task, name the statuses)."), "blank"
        )
    params = QueryDict(mutable=True)
    for name, value in data.items():
        if name not in TaskFilter.base_filters:
            raise invalid(
                name,
                _("Unknown filter. Allowed: %(names)s.")
                % {"names": ", ".join(TaskFilter.base_filters)},
                "unknown_field",
            )
        # JSON types as the schema says: "5" is not an integer and 5 is not a queue name.
        kind = FILTER_BODY_SCHEMA["properties"][name]["type"]
        values = value if kind == "array" and isinstance(value, list) else [value]
        expected = int if kind == "integer" else str
        if (kind == "array" and not isinstance(value, list)) or not all(
            isinstance(v, expected) and not isinstance(v, bool) for v in values
        ):
            raise invalid(
                name,
                _("Not a valid value for this filter (a JSON %(kind)s).") % {"kind": kind},
                "invalid",
            )
        if not values:
            raise invalid(name, _("Give at least one value."), "blank")
        params.setlist(name, [str(v) for v in values])
    filterset = TaskFilter(data=params, queryset=queryset)
    if not filterset.is_valid():
        raise APIValidationError(
            {
                f"filter.{name}": [ErrorDetail(e["message"], code=e["code"]) for e in errors]
                for name, errors in filterset.form.errors.get_json_data().items()
            }
        )
    return filterset.qs
