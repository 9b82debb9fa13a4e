"""A ready task's forecast (`GET /tasks/{rn}/eta/`): when it is expected to start, and the rule
that decides it."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ...enums import Status


class RuleSerializer(serializers.Serializer[Any]):
    """One rule between a ready task and its start, played forward."""

    kind = serializers.CharField(
        help_text="`not_before`, `parents`, `workers`, `queue`, `limit`, `lock`, "
        "`order key` or `rate`."
    )
    name = serializers.CharField()
    capacity = serializers.IntegerField(allow_null=True, help_text="Its places.")
    running = serializers.IntegerField(help_text="Its places taken now.")
    ahead = serializers.IntegerField(help_text="Ready tasks before this one under it.")
    wait = serializers.FloatField(
        allow_null=True, help_text="Seconds until it lets the task start; null: unknown."
    )
    detail = serializers.CharField()


class ForecastSerializer(serializers.Serializer[Any]):
    """When a ready task is expected to start, and the rule that decides it."""

    rn = serializers.CharField()
    status = serializers.ChoiceField(choices=Status.choices)
    now = serializers.DateTimeField(help_text="The database clock when forecast.")
    starts_at = serializers.DateTimeField(allow_null=True)
    wait = serializers.FloatField(allow_null=True, help_text="Seconds from `now`.")
    bottleneck = RuleSerializer(allow_null=True)
    rules = RuleSerializer(many=True)
    run_time = serializers.FloatField(
        allow_null=True, help_text="The run time used, in seconds (measured, or the what-if's)."
    )
    samples = serializers.IntegerField(help_text="Completed tasks it was measured on.")
    what_if = serializers.DictField()
    detail = serializers.CharField()
