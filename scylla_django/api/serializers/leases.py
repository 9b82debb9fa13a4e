"""The operations of the worker that holds a task's lease (`POST /tasks/{rn}/heartbeat/`,
`complete/`, `abort/`, `yield/`, `snooze/`), each naming the lease it holds."""

from __future__ import annotations

from rest_framework import serializers

from ...models.children import MAX_SPAWNED
from .base import JSONValueField, StrictFloatField, StrictSerializer, worker_field
from .durations import DurationInputField, LeaseLengthField
from .submission import SubmitSerializer
from .tasks import TaskErrorSerializer, TaskSerializer


class WorkerActionSerializer(StrictSerializer):
    """A worker operation on a task, naming the lease it holds: the worker and the lease number."""

    worker = worker_field()
    lease = serializers.IntegerField(
        min_value=1,
        max_value=2**31 - 1,
        help_text=(
            "The lease number: the task's `leases` as the lease returned it. A call from an "
            "earlier lease of "
            "the same worker is refused with 409 `lease_lost`."
        ),
    )


class HeartbeatSerializer(WorkerActionSerializer):
    """Extend the lease, optionally reporting progress."""

    progress = StrictFloatField(required=False, min_value=0.0, max_value=1.0)
    lease_length = LeaseLengthField(
        error_code="invalid_lease_length",
        required=False,
        help_text=(
            "Seconds (at least 1) or text such as '5m' until the new deadline; "
            "`SCYLLA['LEASE_LENGTH']` when omitted."
        ),
    )


class SnoozeSerializer(WorkerActionSerializer):
    """Put the task back to ready for `delay`, spending no attempt."""

    delay = DurationInputField(
        error_code="invalid_delay",
        help_text="How long until the task is ready again: seconds above 0, or '30s', '5m'.",
    )


class ChildSerializer(SubmitSerializer):
    """A child task submitted with its parent's completion: a submission without `after`
    (its `parent` is the completed task)."""

    after = None  # type: ignore[assignment]


class CompleteSerializer(WorkerActionSerializer):
    """Finish the task, optionally with a JSON result and children to submit with it."""

    result = JSONValueField(required=False, allow_null=True)
    children = ChildSerializer(  # type: ignore[call-arg]  # many=True takes max_length
        many=True,
        required=False,
        max_length=MAX_SPAWNED,
        help_text="Tasks submitted in the completion's transaction, each naming this task in "
        "`parent` (as a handler's `ctx.spawn()`); none if the completion is refused.",
    )


class AbortSerializer(WorkerActionSerializer):
    """Abort the task, recording at least one error."""

    errors = serializers.ListField(  # type: ignore[assignment]  # see TaskSerializer
        child=TaskErrorSerializer(), min_length=1, max_length=100
    )
    retry = serializers.BooleanField(
        required=False,
        allow_null=True,
        help_text="true: retry whatever the errors; false: never; omitted: as the policy says.",
    )


class AbortedSerializer(TaskSerializer):
    """An aborted task, and the retry submitted with the abort (null if none)."""

    successor = serializers.CharField(
        read_only=True, allow_null=True, help_text="The rn of the retry, if one was submitted."
    )

    class Meta(TaskSerializer.Meta):
        fields = [*TaskSerializer.Meta.fields, "successor"]
        read_only_fields = fields
