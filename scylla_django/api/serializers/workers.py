"""Workers (`/workers/`): registering one, its state and the tasks it holds, and what it
leases."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ...enums import Liveness
from ...models import Worker
from .base import SecondsField, StrictCharField, StrictIntegerField, StrictSerializer, queue_field
from .durations import IntervalField, LeaseLengthField
from .tasks import TaskSerializer

MAX_LEASE_LIMIT = 100


def queues_field(**kwargs: Any) -> serializers.ListField:
    """1 to 100 queue names."""
    return serializers.ListField(
        child=queue_field(),
        min_length=1,
        max_length=100,
        **kwargs,
    )


class RegisterSerializer(StrictSerializer):
    """A worker process to register; its name is given by the server."""

    queues = queues_field()
    capacity = StrictIntegerField(required=False, min_value=1, max_value=10_000)
    hostname = StrictCharField(required=False, allow_blank=True, max_length=255)
    pid = StrictIntegerField(required=False, allow_null=True, min_value=0, max_value=2**31 - 1)
    lease_length = LeaseLengthField(
        error_code="invalid_lease_length",
        required=False,
        help_text="Seconds (at least 1) or text such as '5m': the worker is dead when unseen "
        "this long. `SCYLLA['LEASE_LENGTH']` when omitted.",
    )
    heartbeat_interval = IntervalField(
        error_code="invalid_heartbeat_interval",
        required=False,
        help_text="Seconds or text such as '10s' between the worker's calls: it is silent when "
        "unseen for two. A quarter of `lease_length` when omitted (three heartbeats fit in a "
        "lease with room to spare).",
    )


class WorkerSerializer(serializers.ModelSerializer[Worker]):
    """A registered worker. Its `name` is what worker operations pass as `worker`."""

    name = serializers.CharField(read_only=True)
    queues = serializers.ListField(child=serializers.CharField(), read_only=True)
    heartbeat_interval = SecondsField(
        help_text="Seconds between the worker's heartbeats: what it sent, else a quarter of "
        "`lease_length` (three heartbeats fit in a lease with room to spare)."
    )
    lease_length = SecondsField()

    class Meta:
        model = Worker
        fields = [
            "name",
            "queues",
            "capacity",
            "hostname",
            "pid",
            "started",
            "last_seen",
            "stopped",
            "heartbeat_interval",
            "lease_length",
        ]
        read_only_fields = fields


class LeaseSerializer(StrictSerializer):
    """What to lease: up to `limit` tasks from `queues` (the worker's own when omitted)."""

    queues = queues_field(required=False)
    limit = StrictIntegerField(required=False, min_value=1, max_value=MAX_LEASE_LIMIT)
    lease_length = LeaseLengthField(
        error_code="invalid_lease_length",
        required=False,
        help_text=(
            "Lease length: seconds (at least 1) or text such as '5m'; "
            "`SCYLLA['LEASE_LENGTH']` when omitted."
        ),
    )


class LeasedSerializer(serializers.Serializer[Any]):
    """The leased tasks, highest priority first, then oldest; possibly none."""

    tasks = TaskSerializer(many=True)


class WorkerStateSerializer(WorkerSerializer):
    """A worker with its liveness, judged on the database clock: `alive`; `silent` when unseen
    for two heartbeat intervals; `dead` when unseen for its lease length; `stopped`."""

    state = serializers.ChoiceField(choices=Liveness.choices, read_only=True, source="liveness")

    class Meta(WorkerSerializer.Meta):
        fields = [
            *WorkerSerializer.Meta.fields,
            "state",
            "silent_at",
            "dead_at",
        ]
        read_only_fields = fields


class WorkerDetailSerializer(WorkerStateSerializer):
    """A worker, with the running tasks whose lease it holds."""

    tasks = TaskSerializer(many=True, read_only=True, source="held_tasks")

    class Meta(WorkerStateSerializer.Meta):
        fields = [*WorkerStateSerializer.Meta.fields, "tasks"]
        read_only_fields = fields
