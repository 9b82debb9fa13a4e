"""Durations over HTTP: a number of seconds, or text such as `30s` or `5m`, with a schema that
states exactly what is accepted (a lease length, an interval, a delay, a run-time limit)."""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...conf import LEASE_MIN
from ...text import positive_duration

MAX_LEASE_SECONDS = 10**9

# A duration as text over HTTP: a whole number from 1 to 999 and a unit. The schema states
# exactly what is accepted, so a client (or a fuzzer) that follows it is never refused.
DURATION_TEXT = r"^[1-9][0-9]{0,2}(ms|s|m|h|d|w)$"

# A lease or an interval as text: the same without milliseconds (a lease lasts at least 1 s).
LEASE_TEXT = r"^[1-9][0-9]{0,2}(s|m|h|d|w)$"


def duration_schema(minimum: float, pattern: str) -> dict[str, Any]:
    """The OpenAPI schema of a duration field: seconds from `minimum`, or text."""
    number: dict[str, Any] = {"type": "number", "maximum": MAX_LEASE_SECONDS}
    number.update({"minimum": minimum} if minimum else {"minimum": 0, "exclusiveMinimum": True})
    return {"oneOf": [number, {"type": "string", "pattern": pattern}]}


@extend_schema_field(duration_schema(0, DURATION_TEXT))
class DurationInputField(serializers.Field):  # type: ignore[type-arg]
    """A duration sent as seconds (a number above 0) or as text: a whole number from 1 to 999
    and a unit (`500ms`, `30s`, `5m`, `1h`, `7d`, `2w`); passed on as sent, for the submission
    to read with the project's duration rule. Anything else is refused with `error_code`."""

    minimum = 0.0
    pattern = DURATION_TEXT
    units = "500ms, 30s, 5m, 1h, 7d, 2w"

    def __init__(self, *, error_code: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error_code = error_code

    def to_internal_value(self, data: Any) -> Any:
        number = isinstance(data, int | float) and not isinstance(data, bool)
        low = self.minimum
        if (number and (low <= data if low else 0 < data) and data <= MAX_LEASE_SECONDS) or (
            isinstance(data, str) and re.match(self.pattern, data)
        ):
            return data
        above = _("of at least %(low)s") % {"low": f"{low:g}"} if low else _("above 0")
        raise serializers.ValidationError(
            _(
                "A duration is a number of seconds %(above)s, or a whole number from 1 to 999 "
                "and a unit: %(units)s."
            )
            % {"above": above, "units": self.units},
            code=self.error_code,
        )

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(duration_schema(LEASE_MIN.total_seconds(), LEASE_TEXT))
class LeaseLengthField(DurationInputField):
    """A lease length: seconds from `LEASE_MIN` (1 s), or text such as `30s` or `5m`; the
    seconds as a number."""

    minimum = LEASE_MIN.total_seconds()
    pattern = LEASE_TEXT
    units = "30s, 5m, 1h, 7d, 2w"

    def to_internal_value(self, data: Any) -> Any:
        return positive_duration(super().to_internal_value(data)).total_seconds()


@extend_schema_field(duration_schema(0.001, LEASE_TEXT))
class IntervalField(DurationInputField):
    """An interval: seconds from 0.001, or text such as `10s`; the seconds as a number."""

    minimum = 0.001
    pattern = LEASE_TEXT
    units = "10s, 5m, 1h, 7d, 2w"

    def to_internal_value(self, data: Any) -> Any:
        return positive_duration(super().to_internal_value(data)).total_seconds()
