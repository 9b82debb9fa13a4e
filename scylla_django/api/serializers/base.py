"""What every serializer of the API shares: strict fields (a string is never a number, a
number never a string or a boolean), JSON values, timestamps in UTC, the fields of a task's rn, a
queue's and a worker's name, and request bodies that refuse the keys they do not declare."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from ...validation import (
    QUEUE_MAX_LENGTH,
    RN_MAX_LENGTH,
    queue_validator,
    rn_validator,
    validate_json,
)

WORKER_NAME_MAX_LENGTH = 64
FIRST_INSTANT = datetime.min.replace(tzinfo=UTC)
LAST_INSTANT = datetime.max.replace(microsecond=0, tzinfo=UTC)


class StrictCharField(serializers.CharField):
    """A string, never a number or a boolean turned into one; whitespace is kept."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        if not kwargs.get("allow_blank", False):
            kwargs.setdefault("min_length", 1)  # so that the schema says what "blank" refuses
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: not a boolean, a float or a string of digits."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A finite JSON number: not a boolean or a string."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


def clamp_utc(value: datetime) -> datetime:
    """`value` in UTC; an instant beyond the years 1..9999 in UTC becomes the nearest end.

    `0001-01-01T00:00:00+01:00` is valid ISO 8601, but falls before the first instant Python
    can represent in UTC. As a bound (a filter, a delayed start) the nearest end means the same.
    The last instant is a whole second: SQLite's date functions reject 9999-12-31 23:59:59.9999.
    """
    try:
        return min(value.astimezone(UTC), LAST_INSTANT)
    except OverflowError:
        return FIRST_INSTANT if value.year == 1 else LAST_INSTANT


class UTCDateTimeField(serializers.DateTimeField):
    """An ISO 8601 timestamp, in UTC (see `clamp_utc`); one without an offset is local time."""

    def enforce_timezone(self, value: datetime) -> datetime:
        return clamp_utc(timezone.make_aware(value) if timezone.is_naive(value) else value)


class JSONValueField(serializers.JSONField):
    """Any JSON document the scheduler can store (`validation.validate_json`).

    No NUL characters, NaN or nesting past 64 levels, and at most `SCYLLA['SPEC_SIZE_LIMIT']`
    bytes of compact JSON (else code `too_large`).
    """

    def to_internal_value(self, data: Any) -> Any:
        return validate_json(data, self.field_name or "value", allow_null=self.allow_null)


class StrictSerializer(serializers.Serializer[Any]):
    """A request body: a JSON object with only the declared keys (else 400 `unknown_field`)."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = {
            key: [ErrorDetail(_("Unknown field."), code="unknown_field")]
            for key in (data if isinstance(data, Mapping) else ())
            if key not in self.fields
        }
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                errors: dict[Any, Any] = {**exc.detail, **unknown}
                raise serializers.ValidationError(errors) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


def rn_field(**kwargs: Any) -> StrictCharField:
    """A task's rn."""
    return StrictCharField(max_length=RN_MAX_LENGTH, validators=[rn_validator], **kwargs)


def queue_field(**kwargs: Any) -> StrictCharField:
    """A queue's name."""
    return StrictCharField(max_length=QUEUE_MAX_LENGTH, validators=[queue_validator], **kwargs)


def worker_field() -> StrictCharField:
    """The `worker` of a worker operation: the name `POST /workers/` gave it."""
    return StrictCharField(
        max_length=WORKER_NAME_MAX_LENGTH, help_text="The acting worker's name, `worker-<n>`."
    )


@extend_schema_field({"type": "number", "nullable": True})
class SecondsField(serializers.ReadOnlyField):
    """A duration, written as a number of seconds."""

    def to_representation(self, value: Any) -> Any:
        return None if value is None else float(value.total_seconds())


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObjectField(JSONValueField):
    """A JSON object (an event's payload)."""


def checked(validator: Any, value: Any) -> Any:
    """`validator(value)`, its Django ValidationError as the serializer's, with its code."""
    try:
        return validator(value)
    except DjangoValidationError as exc:
        raise serializers.ValidationError(exc.messages, code=exc.code) from None


# The body of every route that takes no parameters (a cancellation, a pause, a resume, ...); its
# schema component keeps the name `Cancel` that clients know.
class CancelSerializer(StrictSerializer):
    """A cancellation has no parameters: the body is empty or `{}`."""
