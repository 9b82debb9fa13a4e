"""Schedules (`/schedules/`): a schedule, why it does not fire, its calendar and its trigger's
firings, and a schedule to create or change."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...models import CatchUp, FiringOutcome, Schedule, WaitingRun
from ...schedules import DEFINITION_KEYS as SCHEDULE_KEYS
from ...schedules.firings import latest_firings, why_not
from ...schedules.triggers import SINCE_ALL, SINCE_CHANGE
from ...validation import schedule_name_validator
from .base import (
    JSONValueField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    queue_field,
)
from .events import EventOutSerializer


class WaitingSerializer(serializers.ModelSerializer[WaitingRun]):
    """A firing waiting for the schedule's run constraints: the task it will submit (`rn`),
    since when, until when at most (`deadline`, from `wait_timeout`), and what it waits for."""

    class Meta:
        model = WaitingRun
        fields = ["rn", "fired", "since", "deadline", "recheck", "code", "reason", "merged"]
        read_only_fields = fields


def seconds(value: timedelta | None) -> float | None:
    """A duration in seconds, for the API."""
    return None if value is None else value.total_seconds()


class ScheduleSerializer(serializers.ModelSerializer[Schedule]):
    """A recurring schedule; `every`, `min_gap` and `wait_timeout` in seconds; `waiting` is
    the firing held for the run constraints, if any. Every field is read-only."""

    spec = JSONValueField(read_only=True)
    every = serializers.SerializerMethodField()
    min_gap = serializers.SerializerMethodField()
    wait_timeout = serializers.SerializerMethodField()
    waiting = serializers.SerializerMethodField()

    class Meta:
        model = Schedule
        fields = [
            "name",
            *SCHEDULE_KEYS,
            "from_settings",
            "next_run",
            "last_run",
            "last_task",
            "waiting",
        ]
        read_only_fields = fields

    def get_every(self, schedule: Schedule) -> int | None:
        return None if schedule.every is None else int(schedule.every.total_seconds())

    def get_min_gap(self, schedule: Schedule) -> float | None:
        return seconds(schedule.min_gap)

    def get_wait_timeout(self, schedule: Schedule) -> float | None:
        return seconds(schedule.wait_timeout)

    @extend_schema_field(WaitingSerializer(allow_null=True))
    def get_waiting(self, schedule: Schedule) -> dict[str, Any] | None:
        try:
            waiting = schedule.waiting  # select_related("waiting") in lists
        except WaitingRun.DoesNotExist:
            return None
        return WaitingSerializer(waiting).data


class UnmetSerializer(serializers.Serializer[Any]):
    """A run constraint unmet now, and the soonest it can be met (null: unknown)."""

    code = serializers.CharField(help_text="window, min_gap, max_runs, max_concurrent or max_load.")
    detail = serializers.CharField()
    until = serializers.DateTimeField(allow_null=True)


class DelayedSerializer(serializers.Serializer[Any]):
    """A firing of a trigger waiting for the trigger's `delay`: its task's rn, when the
    trigger fired and when it goes through the run constraints (`due`)."""

    rn = serializers.CharField()
    time = serializers.DateTimeField()
    due = serializers.DateTimeField()


class TriggerWhySerializer(serializers.Serializer[Any]):
    """Where a schedule's trigger counts events from, what is unmet in it now, and its firings
    waiting for the trigger's delay."""

    since = serializers.ChoiceField(
        choices=[SINCE_CHANGE, SINCE_ALL],
        help_text='"change": the events after the watermark (the schedule\'s creation or the '
        'last change of its trigger); "all": every event no firing of it consumed.',
    )
    counts_after = serializers.IntegerField(
        allow_null=True,
        help_text="The watermark: events after this event id count (null: every event).",
    )
    counts_from = serializers.DateTimeField(
        allow_null=True,
        help_text="The watermark's time: events from this time on count (null: every event).",
    )
    unmet = serializers.ListField(child=serializers.CharField())
    delayed = DelayedSerializer(many=True)


class WhySerializer(serializers.Serializer[Any]):
    """Why a schedule does not fire now: its run constraints unmet now, and the firing that
    waits for them (null if none). `runs` is true when a firing now would run at once. For a
    schedule with a trigger, `trigger` says where it counts events from (its watermark), what
    is unmet and which firings wait for its delay (null without a trigger)."""

    name = serializers.CharField()
    enabled = serializers.BooleanField()
    runs = serializers.BooleanField()
    now = serializers.DateTimeField()
    next_run = serializers.DateTimeField(allow_null=True)
    unmet = UnmetSerializer(many=True)
    waiting = WaitingSerializer(allow_null=True)
    trigger = TriggerWhySerializer(allow_null=True)


class CalendarEntrySerializer(serializers.Serializer[Any]):
    """A tick to come: UTC and wall-clock time, `dst` ("gap": moved to the end of a skipped
    hour, "repeated": in an hour that happens twice, `fold` 0 the first pass and 1 the
    second), and when it would run with the windows applied (`runs`, null if skipped or
    merged into a waiting firing; `note` says why)."""

    tick = serializers.DateTimeField()
    local = serializers.CharField()
    dst = serializers.CharField()
    fold = serializers.IntegerField()
    runs = serializers.DateTimeField(allow_null=True)
    note = serializers.CharField()


class FiringSerializer(serializers.Serializer[Any]):
    """A firing of a schedule's trigger: its task, what the run constraints made of it and the
    events it consumed."""

    rn = serializers.CharField(
        help_text="The rn of the firing's task (none was submitted unless the outcome is "
        "submitted; a waiting firing submits it once its constraints are met)."
    )
    outcome = serializers.ChoiceField(
        choices=FiringOutcome.choices,
        help_text="submitted; delayed (waiting for the trigger's delay, until due); waiting "
        "(for the schedule's run constraints); merged (into the firing that waits); skipped "
        "(a constraint was unmet, when_unmet is skip).",
    )
    time = serializers.DateTimeField()
    due = serializers.DateTimeField(
        allow_null=True,
        help_text="With a trigger's delay: when the firing goes (or went) through the run "
        "constraints; null without a delay.",
    )
    events = EventOutSerializer(many=True)


class ScheduleDetailSerializer(ScheduleSerializer):
    """A schedule with, for a trigger, its latest firings and what is unmet now."""

    firings = serializers.SerializerMethodField()
    unmet = serializers.SerializerMethodField()

    class Meta(ScheduleSerializer.Meta):
        fields = [*ScheduleSerializer.Meta.fields, "firings", "unmet"]
        read_only_fields = fields

    @extend_schema_field(FiringSerializer(many=True))
    def get_firings(self, schedule: Schedule) -> list[dict[str, Any]]:
        return [
            FiringSerializer(
                {
                    "rn": f.rn,
                    "outcome": f.outcome,
                    "time": f.time,
                    "due": f.due,
                    "events": [c.event for c in f.consumptions.all()],
                }
            ).data
            for f in latest_firings(schedule)
        ]

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_unmet(self, schedule: Schedule) -> list[str]:
        """Why the trigger has not fired: each unmet part, in words (empty: it fires next)."""
        return why_not(schedule)


class ScheduleInputSerializer(StrictSerializer):
    """A schedule to create or change: exactly one of `cron`, `every` and `trigger`."""

    name = StrictCharField(max_length=100, validators=[schedule_name_validator], required=False)
    cron = StrictCharField(required=False, allow_blank=True, max_length=200)
    every = JSONValueField(
        required=False, allow_null=True, help_text='Seconds, or "30s", "5m", "2h", "1d".'
    )
    trigger = JSONValueField(
        required=False,
        allow_null=True,
        help_text='Fire on events: {"on_event": "partition.added", "match": {...}}, '
        '{"on_task": "queue"}, with "count" or "quiet", or {"all"|"any": [...]}; at the top, '
        '"delay" (run that long after it fires), "since" ("change", the default: the events '
        'after the schedule was created or its trigger changed; "all") and "with_events".',
    )
    timezone = StrictCharField(required=False, max_length=64)
    queue = queue_field(required=False)
    spec = JSONValueField(required=False)
    priority = StrictIntegerField(required=False, min_value=0, max_value=255)
    enabled = serializers.BooleanField(required=False)
    catch_up = serializers.ChoiceField(choices=CatchUp.choices, required=False)
    skip_if_running = serializers.BooleanField(required=False)
    window = JSONValueField(
        required=False, allow_null=True, help_text='"HH:MM-HH:MM" or a list of them.'
    )
    min_gap = JSONValueField(required=False, allow_null=True, help_text='Seconds, or "10m".')
    max_runs = StrictCharField(
        required=False, allow_blank=True, max_length=20, help_text='"4/h", "1/d".'
    )
    max_concurrent = JSONValueField(required=False, allow_null=True)
    max_load = JSONValueField(
        required=False,
        allow_null=True,
        help_text="Launch only while a live worker of the queue reports a host load at or "
        "under this.",
    )
    when_unmet = StrictCharField(required=False, max_length=10, help_text='"wait" or "skip".')
    wait_timeout = JSONValueField(required=False, allow_null=True, help_text='Seconds, or "2h".')
    on_timeout = StrictCharField(required=False, max_length=10, help_text='"cancel" or "force".')
