"""Queues (`/queues/`): their counts, their settings, and a change of their cap or limit."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .base import StrictIntegerField, StrictSerializer


class QueueSerializer(serializers.Serializer[Any]):
    """One queue: how many tasks it has in each status, and how old its oldest ready task is."""

    queue = serializers.CharField()
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Tasks per status; every status is present."
    )
    oldest_ready = serializers.DateTimeField(allow_null=True)
    oldest_ready_age = serializers.FloatField(
        allow_null=True, help_text="Seconds since the oldest ready task was created (DB clock)."
    )


class QueueSettingSerializer(serializers.Serializer[Any]):
    """How a queue is leased: paused or not, and its limit on running tasks; and its cap on
    ready tasks."""

    queue = serializers.CharField()
    paused = serializers.BooleanField(help_text="No task of the queue is leased while paused.")
    max_running = serializers.IntegerField(
        allow_null=True, help_text="At most this many of its tasks run at once; null: no limit."
    )
    max_ready = serializers.IntegerField(
        allow_null=True, help_text="At most this many of its tasks wait ready; null: no cap."
    )
    on_full = serializers.CharField(
        help_text="What a submission to the full queue does: `reject` or `shed_oldest`."
    )
    updated = serializers.DateTimeField(allow_null=True)


class QueueCapSerializer(StrictSerializer):
    """`PUT /queues/{name}/cap/`: the new cap on ready tasks (null: none) and what a
    submission to the full queue does."""

    max_ready = StrictIntegerField(min_value=1, max_value=100_000_000, allow_null=True)
    on_full = serializers.ChoiceField(choices=["reject", "shed_oldest"], default="reject")


class QueueLimitSerializer(StrictSerializer):
    """`PUT /queues/{name}/limit/`: the new limit on running tasks (null: none)."""

    max_running = StrictIntegerField(min_value=1, max_value=1_000_000, allow_null=True)
