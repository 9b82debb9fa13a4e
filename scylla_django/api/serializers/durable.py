"""Durable execution (docs/howto/durable.md): what a task's runs recorded, an HTTP worker's
steps, cursor and waits, and the signals a task is sent."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from rest_framework import serializers

from ...models import steps
from ...schedules import events
from .base import JSONObjectField, JSONValueField, StrictCharField, StrictSerializer, checked
from .durations import DurationInputField
from .leases import WorkerActionSerializer

NAME_VALIDATOR = RegexValidator(steps.NAME_PATTERN, code="invalid_name")


class StepSerializer(serializers.Serializer[Any]):
    """A step a task completed: its name, result, the result's size, when and under which
    lease number."""

    name = serializers.CharField()
    result = serializers.JSONField(allow_null=True)
    size = serializers.IntegerField(help_text="The result's size in bytes, as compact JSON.")
    time = serializers.DateTimeField()
    lease = serializers.IntegerField(help_text="The lease number of the run that recorded it.")


class WaitSerializer(serializers.Serializer[Any]):
    """A durable sleep or wait of a task: what it waits for, until when, how it ended."""

    name = serializers.CharField()
    kind = serializers.CharField(help_text="sleep, event or signal.")
    event_kind = serializers.CharField(allow_null=True)
    match = serializers.JSONField(allow_null=True)
    signal = serializers.CharField(allow_null=True)
    started = serializers.DateTimeField()
    timeout = serializers.DateTimeField(
        allow_null=True, help_text="When it times out (a sleep: ends); null: never."
    )
    outcome = serializers.CharField(
        allow_null=True, help_text="null while it waits; woken or timed_out."
    )
    ended = serializers.DateTimeField(allow_null=True)
    payload = serializers.JSONField(
        allow_null=True, help_text="What woke it: the event's or the signal's payload."
    )
    lease = serializers.IntegerField()
    describe = serializers.CharField(help_text="What it waits for, in words.")


class SignalSerializer(serializers.Serializer[Any]):
    """A signal a task was sent."""

    name = serializers.CharField()
    payload = serializers.JSONField(allow_null=True)
    time = serializers.DateTimeField()


class DurableSerializer(serializers.Serializer[Any]):
    """What a task's runs recorded: its steps, its cursor, its waits and its signals."""

    steps = StepSerializer(many=True)
    cursor = serializers.JSONField(allow_null=True, help_text="The last checkpoint's cursor.")
    waits = WaitSerializer(many=True)
    signals = SignalSerializer(many=True)


class StepInputSerializer(WorkerActionSerializer):
    """`POST tasks/{rn}/step/`: record a step, fenced on the lease."""

    name = StrictCharField(max_length=100, validators=[NAME_VALIDATOR])
    result = JSONValueField(required=False, allow_null=True, default=None)

    def validate_name(self, value: str) -> Any:
        return checked(steps.validate_name, value)


class CheckpointInputSerializer(WorkerActionSerializer):
    """`POST tasks/{rn}/checkpoint/`: write the task's cursor, fenced on the lease."""

    cursor = JSONValueField(allow_null=True)


class WaitInputSerializer(WorkerActionSerializer):
    """`POST tasks/{rn}/wait/`: begin a durable sleep or wait (or take it up again)."""

    name = StrictCharField(max_length=100, validators=[NAME_VALIDATOR])
    kind = serializers.ChoiceField(choices=["sleep", "event", "signal"])
    event_kind = StrictCharField(
        max_length=200,
        required=False,
        validators=[RegexValidator(events.KIND_PATTERN, code="invalid_kind")],
    )
    match = JSONObjectField(required=False)
    signal = StrictCharField(max_length=100, required=False, validators=[NAME_VALIDATOR])
    timeout = DurationInputField(
        error_code="invalid_delay",
        required=False,
        help_text="How long it waits at most (a sleep: how long it sleeps): seconds or '5m'.",
    )

    def validate_name(self, value: str) -> Any:
        return checked(steps.validate_name, value)

    def validate_signal(self, value: str) -> Any:
        return checked(steps.validate_name, value)

    def validate_event_kind(self, value: str) -> Any:
        return checked(events.validate_kind, value)

    def validate_match(self, value: Any) -> Any:
        return checked(events.validate_match, value)


class WaitAnswerSerializer(serializers.Serializer[Any]):
    """The wait as it stands, and whether the task was parked (the run must end)."""

    parked = serializers.BooleanField()
    wait = WaitSerializer()


class SignalInputSerializer(StrictSerializer):
    """A signal's payload (any JSON, null by default)."""

    payload = JSONValueField(required=False, allow_null=True, default=None)
