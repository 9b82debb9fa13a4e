"""Events (`/events/`): an event, the schedules that consumed it, and an event to emit."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...models import Event
from ...schedules import events
from .base import JSONObjectField, StrictCharField, StrictSerializer, checked


class EventOutSerializer(serializers.Serializer[Any]):
    """An event: its `kind`, `payload` and the database's `time` of its writing."""

    id = serializers.IntegerField()
    kind = serializers.CharField()
    payload = serializers.JSONField()
    time = serializers.DateTimeField()


class EventSerializer(EventOutSerializer):
    """An event of `GET /events/`, with the schedules whose firings consumed it."""

    consumed_by = serializers.SerializerMethodField(
        help_text="The names of the schedules whose firings consumed this event (empty: none "
        "yet), in the order they consumed it."
    )

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_consumed_by(self, event: Event) -> list[str]:
        return [c.schedule.name for c in event.consumptions.all()]


class EventInputSerializer(StrictSerializer):
    """`POST /events/`: an event to emit."""

    kind = StrictCharField(
        max_length=200, validators=[RegexValidator(events.KIND_PATTERN, code="invalid_kind")]
    )
    payload = JSONObjectField(required=False)

    def validate_kind(self, value: str) -> Any:
        return checked(events.validate_kind, value)

    def validate_payload(self, value: Any) -> Any:
        return checked(events.validate_payload, value)
