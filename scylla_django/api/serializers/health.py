"""The health check (`GET /health/`): which checks to run, and how each went."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from .base import queue_field
from .durations import MAX_LEASE_SECONDS


class HealthQuerySerializer(serializers.Serializer[Any]):
    """Which checks to run besides the database's (query parameters)."""

    # Taken as given, as hostnames are stored: trimmed, a parameter of spaces would turn
    # blank and be refused although the schema allows it.
    hostname = serializers.CharField(
        required=False,
        min_length=1,
        max_length=255,
        trim_whitespace=False,
        help_text="Check that a worker registered from this host is heartbeating.",
    )
    monitor = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Check that a monitor made a pass within three of its intervals.",
    )
    max_lag = serializers.FloatField(
        required=False,
        min_value=0.001,
        max_value=MAX_LEASE_SECONDS,
        help_text="Seconds: check that no leasable ready task has waited longer.",
    )
    queue = serializers.ListField(
        child=queue_field(),
        required=False,
        max_length=100,
        help_text="With `max_lag`: only these queues (repeat the parameter).",
    )
    vacuum = serializers.BooleanField(
        required=False,
        default=False,
        help_text="PostgreSQL: name what holds VACUUM back from the queue tables, the sessions "
        "idle in a transaction, and the tables' dead rows and bloat (warnings only).",
    )

    def to_internal_value(self, data: Any) -> Any:
        # A parameter given empty (`?hostname=`) is refused, not taken as absent: ignoring it
        # would hide a probe's misconfiguration.
        getlist = getattr(data, "getlist", None)
        if getlist is not None:
            blank: dict[str, Any] = {
                str(name): [ErrorDetail(_("This parameter may not be empty."), code="blank")]
                for name in self.fields
                if "" in getlist(name)
            }
            if blank:
                raise serializers.ValidationError(blank)
        return super().to_internal_value(data)


class HealthCheckSerializer(serializers.Serializer[Any]):
    """One check: its name, whether it passed, and why."""

    name = serializers.CharField()
    ok = serializers.BooleanField()
    detail = serializers.CharField()


class HealthSerializer(serializers.Serializer[Any]):
    """`ok` (200) when every check passed, else `failing` (503)."""

    status = serializers.ChoiceField(choices=["ok", "failing"])
    checks = HealthCheckSerializer(many=True)
