"""Batches (`/batches/`): a batch to submit with its callbacks, its progress and its results."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .base import JSONValueField, StrictIntegerField, StrictSerializer, queue_field
from .submission import BulkOutcomeSerializer, SubmitSerializer

MAX_BATCH_ITEMS = 10_000

#: A batch's states (`models.Batch.state`).
BATCH_STATES = ["running", "completed", "failed", "cancelled"]


class BatchTaskSerializer(SubmitSerializer):
    """A task of a batch: as `POST /tasks/` takes it, but a task of a batch waits for no
    parents (no `after`), and the batch's request is its submitter (no `submitter_name` or
    `submitter_description` of its own)."""

    after = None  # type: ignore[assignment]
    submitter_name = None  # type: ignore[assignment]
    submitter_description = None  # type: ignore[assignment]


class CallbackSerializer(StrictSerializer):
    """A batch's callback: the task submitted with the batch and held until its condition."""

    queue = queue_field()
    spec = JSONValueField(help_text="Any JSON but null.")
    priority = StrictIntegerField(
        required=False, min_value=0, max_value=255, help_text="0..255, higher first."
    )


class BatchSubmitSerializer(StrictSerializer):
    """A batch to submit: its tasks (as `POST /tasks/` takes them, without `after`) and its
    callbacks."""

    tasks = serializers.ListField(
        child=BatchTaskSerializer(),
        min_length=1,
        max_length=MAX_BATCH_ITEMS,
        help_text=f"1 to {MAX_BATCH_ITEMS} tasks, as `POST /tasks/` takes them (no `after`).",
    )
    on_success = CallbackSerializer(
        required=False, allow_null=True, help_text="Runs once every task completed."
    )
    on_complete = CallbackSerializer(
        required=False, allow_null=True, help_text="Runs once every task finished."
    )
    on_failure = CallbackSerializer(
        required=False,
        allow_null=True,
        help_text="Runs after the first task that failed for good (aborted with no retry "
        "left, or cancelled).",
    )


class BatchSerializer(serializers.Serializer[Any]):
    """A batch and its progress; its callbacks by rn."""

    id = serializers.IntegerField()
    created = serializers.DateTimeField()
    state = serializers.ChoiceField(choices=BATCH_STATES)
    total = serializers.IntegerField(help_text="Tasks submitted in the batch.")
    done = serializers.IntegerField(help_text="Tasks finished: completed, or failed for good.")
    completed = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="Tasks aborted for good, or cancelled.")
    on_success = serializers.CharField(source="on_success.rn", allow_null=True, default=None)
    on_complete = serializers.CharField(source="on_complete.rn", allow_null=True, default=None)
    on_failure = serializers.CharField(source="on_failure.rn", allow_null=True, default=None)
    cancelled = serializers.DateTimeField(allow_null=True)
    closed = serializers.DateTimeField(
        allow_null=True, help_text="When every callback was released or cancelled."
    )


class BatchSubmittedSerializer(BatchSerializer):
    """A batch just submitted, with what happened to each of its tasks."""

    outcomes = BulkOutcomeSerializer(many=True)


class BatchResultSerializer(serializers.Serializer[Any]):
    """A completed task of a batch and its result."""

    rn = serializers.CharField()
    result = serializers.JSONField(allow_null=True)


class BatchResultsSerializer(serializers.Serializer[Any]):
    """A page of a batch's results, and the `after` of the next page (null: the last)."""

    results = BatchResultSerializer(many=True)
    next = serializers.IntegerField(allow_null=True)
