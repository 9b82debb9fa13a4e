"""The filters of `GET /tasks/` (SPEC §6), as a django-filter FilterSet.

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
from django.db.models import Q
from django.http import QueryDict
from drf_spectacular.utils import extend_schema_field

from ..enums import Status
from ..models import Task
from ..validation import QUEUE_MAX_LENGTH, RN_MAX_LENGTH, queue_validator, rn_validator
from .serializers import clamp_utc


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
        return qs.filter(Q(root=value) | Q(rn=value))


class NoEmptyValuesForm(forms.Form):
    """Refuses a parameter given empty (`?queue=`): the schema allows no empty value, and
    ignoring it would hide a client's bug.
    """

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        for name in self.fields:
            if isinstance(self.data, QueryDict) and "" in self.data.getlist(name):
                self.add_error(name, ValidationError("This parameter may not be empty.", "blank"))
        return cleaned


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": 64, "description": "Worker name (`worker-7`)."}
)
class OwnerFilter(django_filters.CharFilter):  # type: ignore[misc, unused-ignore]
    """The worker that holds or held a task, matched exactly."""

    def __init__(self) -> None:
        super().__init__(max_length=64)


class TaskFilter(django_filters.FilterSet):  # type: ignore[misc, unused-ignore]
    """`status` (repeatable), `queue`, `owner`, `rn`, priority and created/updated ranges."""

    status = django_filters.MultipleChoiceFilter(
        choices=Status.choices,
        distinct=False,  # a plain `status IN (…)`: no join can repeat a row
        help_text="One or more statuses (repeat the parameter).",
    )
    queue = QueueFilter()
    owner = OwnerFilter()
    rn = RnFilter()
    root = RootFilter()
    priority_min = PriorityFilter("gte")
    priority_max = PriorityFilter("lte")
    created_after = TimestampFilter(field_name="created", lookup_expr="gte")
    created_before = TimestampFilter(field_name="created", lookup_expr="lt")
    updated_after = TimestampFilter(field_name="updated", lookup_expr="gte")
    updated_before = TimestampFilter(field_name="updated", lookup_expr="lt")

    class Meta:
        model = Task
        form = NoEmptyValuesForm
        fields = [
            "status",
            "queue",
            "owner",
            "rn",
            "root",
            "priority_min",
            "priority_max",
            "created_after",
            "created_before",
            "updated_after",
            "updated_before",
        ]
