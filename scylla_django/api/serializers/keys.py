"""Keys (`/locks/`, `/limits/`, `/rates/`, `/holds/`): the locks held, the limits and rates, a
change of one, and a hold released."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...models.key_control import MAX_LIMIT
from ...models.keys import RATE_PATTERN, parse_rate
from ...validation import KEY_NAME_MAX_LENGTH
from .base import StrictCharField, StrictIntegerField, StrictSerializer


class LockHeldSerializer(serializers.Serializer[Any]):
    """A lock held now: by a running task (`holder`) or by a hold of code outside tasks
    (`hold`, the token an operator force-releases)."""

    key = serializers.CharField()
    mode = serializers.ChoiceField(choices=["exclusive", "shared"])
    holder = serializers.CharField(allow_null=True, help_text="The rn of the running task.")
    hold = serializers.IntegerField(allow_null=True, help_text="The hold's token.")
    since = serializers.DateTimeField(
        allow_null=True, help_text="The task's lease, or the hold's taking."
    )
    expires = serializers.DateTimeField(
        allow_null=True,
        help_text="The task's lease deadline, or the hold's end (null: until released).",
    )


class LimitSerializer(serializers.Serializer[Any]):
    """A limit: at most `max_running` running tasks hold one of its slots; `running` now."""

    name = serializers.CharField()
    max_running = serializers.IntegerField()
    running = serializers.IntegerField(help_text="Running tasks holding a slot now.")
    configured = serializers.BooleanField(
        help_text="Its size is the one SCYLLA['LIMITS'] gives (false: set at runtime, or not "
        "in the settings)."
    )


class RateSerializer(serializers.Serializer[Any]):
    """A rate: at most `count` starts in any `seconds`; `starts` within the last `seconds`."""

    name = serializers.CharField()
    rate = serializers.CharField(source="text", help_text='As settings write it: "100/m".')
    count = serializers.IntegerField()
    seconds = serializers.FloatField()
    starts = serializers.IntegerField(help_text="Starts within the last `seconds` now.")
    configured = serializers.BooleanField(
        help_text="It is the rate SCYLLA['RATES'] gives (false: set at runtime, or not in the "
        "settings)."
    )


def key_name_field(**kwargs: Any) -> StrictCharField:
    """The name of a lock, limit, order key or rate."""
    return StrictCharField(max_length=KEY_NAME_MAX_LENGTH, **kwargs)


class LimitInputSerializer(StrictSerializer):
    """`POST /limits/`: a limit to make or change."""

    name = key_name_field()
    max_running = StrictIntegerField(min_value=1, max_value=MAX_LIMIT)


class LimitChangeSerializer(StrictSerializer):
    """`PATCH /limits/{name}/`: the limit's new size."""

    max_running = StrictIntegerField(min_value=1, max_value=MAX_LIMIT)


@extend_schema_field({"type": "string", "pattern": RATE_PATTERN, "minLength": 1, "maxLength": 20})
class RateField(serializers.Field):  # type: ignore[type-arg]
    """A rate as settings write it: "100/m", "5/10s". Anything else is a 400 `invalid_rate`
    with the message `key_control.set_rate` gives from Python (`keys.parse_rate`)."""

    def to_internal_value(self, data: Any) -> str:
        try:
            parse_rate(data)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages, code="invalid_rate") from None
        return str(data)

    def to_representation(self, value: Any) -> Any:
        return value


def rate_field() -> RateField:
    """A rate as settings write it: "100/m", "5/10s"."""
    return RateField(
        help_text='"<count>/<period>", the period s, m, h or d with an optional number: '
        '"100/m", "5/10s".',
    )


class RateInputSerializer(StrictSerializer):
    """`POST /rates/`: a rate to make or change."""

    name = key_name_field()
    rate = rate_field()


class RateChangeSerializer(StrictSerializer):
    """`PATCH /rates/{name}/`: the rate's new count and period."""

    rate = rate_field()


class ReleasedSerializer(serializers.Serializer[Any]):
    """`POST /holds/{token}/release/`: the hold is gone."""

    hold = serializers.IntegerField()
    released = serializers.BooleanField()
