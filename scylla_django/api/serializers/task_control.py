"""What an operator's control of one task answers: the record of a deleted task
(`DELETE /tasks/{rn}/`)."""

from __future__ import annotations

from rest_framework import serializers

from ...models import TaskDeletion
from .base import JSONValueField


class TaskDeletionSerializer(serializers.ModelSerializer[TaskDeletion]):
    """The record of a deleted task: what it was, when and by whom it was deleted, and its
    History (each entry as in a task's `history`, closed by a `TaskDeletion` entry)."""

    spec = JSONValueField(read_only=True)
    history = serializers.ListField(child=serializers.DictField(), read_only=True)

    class Meta:
        model = TaskDeletion
        fields = ["rn", "queue", "spec", "priority", "created", "deleted", "by", "history"]
        read_only_fields = fields
