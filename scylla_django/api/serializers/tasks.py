"""A task as the API shows it (`GET /tasks/`, `GET /tasks/{rn}/` and every answer that
returns a task): its fields, its errors, its History, its parents, children and submitter."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.validators import RegexValidator
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ... import followups
from ...enums import EventType, Status
from ...models import History, Task, TaskOrigin, task_pauses
from ...models.keys import described
from ...models.traces import trace_id_of, traceparent_of
from ...validation import ORDER_ON_FAILURE
from .base import JSONValueField, SecondsField, StrictCharField, StrictSerializer

# Some character that `str.isspace()` does not match, as the model's `code.strip()` requires.
# Spelled out: a pattern's `\s` means other characters in Python and in JSON Schema.
not_blank = RegexValidator(
    r"[^\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
    gettext_lazy("An error code cannot be blank."),
    code="blank",
)


class TaskErrorSerializer(StrictSerializer):
    """One error of an aborted task: `{"code", "args", "description"}`."""

    code = StrictCharField(max_length=200, validators=[not_blank])
    args = JSONValueField(required=False, help_text="Any JSON; `{}` when omitted.")
    description = StrictCharField(required=False, allow_blank=True)
    retry = serializers.BooleanField(
        required=False, help_text="The error asks for a retry under the task's retry policy."
    )


class NotBeforeField(serializers.DateTimeField):
    """A task's own `not_before`: for a follow-up waiting for its parents or a task an
    operator paused, the delayed start it takes once released or resumed (null: none), never
    the far-off date that keeps it meanwhile."""

    def get_attribute(self, instance: Task) -> datetime | None:
        known: dict[int, datetime | None] = getattr(self.parent, "own_not_before", {})
        if instance.pk in known:
            return known[instance.pk]
        return own_not_before([instance])[instance.pk]


def own_not_before(tasks: list[Task]) -> dict[int, datetime | None]:
    """Each task's own `not_before` by id, follow-ups' and paused tasks' included."""
    return {**followups.own_not_before(tasks), **task_pauses.own_not_before(tasks)}


class TaskListSerializer(serializers.ListSerializer[Task]):
    """Tasks: the own `not_before` of the follow-ups among them in one query."""

    def to_representation(self, data: Any) -> list[Any]:
        tasks = list(data.all() if hasattr(data, "all") else data)
        self.child.own_not_before = own_not_before(tasks)  # type: ignore[union-attr]
        return super().to_representation(tasks)


class KeyPartField(serializers.ReadOnlyField):
    """One of a task's keys, as a submission names it (`keys.described`)."""

    def __init__(self, part: str, **kwargs: Any) -> None:
        self.part = part
        super().__init__(**kwargs)

    def get_attribute(self, instance: Task) -> Any:
        return described(instance)[self.part]


def key_part(part: str, schema: dict[str, Any], help_text: str) -> KeyPartField:
    """The read-only field of a task's key `part`, documented by `schema`."""
    field_class = extend_schema_field(schema)(type(f"KeyPart_{part}", (KeyPartField,), {}))
    return field_class(part, help_text=help_text)  # type: ignore[no-any-return]


class TaskSerializer(serializers.ModelSerializer[Task]):
    """A task, with the field names of docs/reference/task.md. Every field is read-only."""

    spec = JSONValueField(read_only=True)
    result = JSONValueField(read_only=True, allow_null=True)
    # A field called `errors`: DRF's metaclass takes it out of the class, so the property
    # `Serializer.errors` still works, which the stubs cannot know.
    errors = TaskErrorSerializer(many=True, read_only=True)  # type: ignore[assignment]
    status = serializers.ChoiceField(choices=Status.choices, read_only=True)
    rn = serializers.CharField(read_only=True)
    queue = serializers.CharField(read_only=True)
    owner = serializers.CharField(read_only=True, allow_null=True)
    not_before = NotBeforeField(
        read_only=True,
        allow_null=True,
        help_text="Not leased before this time. A follow-up also waits for its `parents`, and "
        "a paused task until it resumes (its `waiting` says `paused`).",
    )
    unique_key = serializers.CharField(read_only=True, allow_null=True)
    unique_window = SecondsField(help_text="Seconds a finished task keeps its unique key.")
    locks = key_part(
        "locks",
        {
            "type": "array",
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
        },
        'The locks the task takes, each `[name, "exclusive" | "shared"]`.',
    )
    limits = key_part(
        "limits", {"type": "array", "items": {"type": "string"}}, "The limits it takes a slot of."
    )
    order_key = key_part(
        "order_key",
        {"type": "string", "nullable": True},
        "Its key's tasks run one at a time, in submit order.",
    )
    order_on_failure = key_part(
        "order_on_failure",
        {"type": "string", "enum": list(ORDER_ON_FAILURE), "nullable": True},
        "With an order key: whether an abort for good holds the key.",
    )
    rate_key = key_part(
        "rate_key",
        {"type": "string", "nullable": True},
        "The rate the task's start counts against.",
    )
    cpu_time = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="CPU seconds the handler's last run used (its thread's, or its child "
        "process's under process isolation); null until a worker finished it.",
    )
    peak_memory = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="Peak resident memory in bytes of the child process that ran the handler "
        "(measured under process isolation only); null otherwise.",
    )
    timeout = SecondsField(
        help_text="The task's own run-time limit in seconds (null: its handler's or queue's)."
    )
    snoozes = serializers.IntegerField(
        read_only=True, help_text="How many times its handler snoozed it (no attempt spent)."
    )
    expires_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="Cancelled (`expired`) if not started by then; never leased after it.",
    )
    batch = serializers.IntegerField(
        source="batch_id", read_only=True, allow_null=True, help_text="The task's batch."
    )
    dead = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When this aborted task was given up (a dead letter), until requeued or "
        "discarded.",
    )
    notify = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The URL its outcome is POSTed to once final (null: none).",
    )
    notified = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When the delivery of its notification was submitted (the task "
        "`scylla.notify.<id>`, whose `parent` is this task).",
    )

    class Meta:
        model = Task
        list_serializer_class = TaskListSerializer
        fields = [
            "rn",
            "queue",
            "spec",
            "priority",
            "status",
            "progress",
            "created",
            "updated",
            "not_before",
            "errors",
            "result",
            "owner",
            "deadline",
            "leases",
            "retry_of",
            "root",
            "attempt",
            "unique_key",
            "unique_window",
            "locks",
            "limits",
            "order_key",
            "order_on_failure",
            "rate_key",
            "cpu_time",
            "peak_memory",
            "timeout",
            "parent",
            "snoozes",
            "expires_at",
            "batch",
            "dead",
            "notify",
            "notified",
            "version",
        ]
        read_only_fields = fields
        # Not declared above: a serializer field's `parent` attribute is DRF's own.
        extra_kwargs = {"parent": {"help_text": "The rn of the task that spawned this one."}}


class HistorySerializer(serializers.Serializer[History]):
    """A History entry, as `History.as_json()` renders it (docs/reference/api.md).

    `progress` is always present: null for an event that recorded none.
    """

    _typ = serializers.ChoiceField(choices=EventType.choices, read_only=True, label="Event type")
    worker = serializers.CharField(read_only=True, allow_null=True)
    progress = serializers.FloatField(read_only=True, allow_null=True)
    time = serializers.DateTimeField(read_only=True)

    def to_representation(self, instance: History) -> dict[str, Any]:
        entry = instance.as_json()
        return {
            "_typ": entry["_typ"],
            "worker": entry["worker"],
            "progress": entry.get("progress"),
            "time": entry["time"],
        }


class ParentSerializer(serializers.Serializer[Any]):
    """A task that a follow-up waits for."""

    rn = serializers.CharField(read_only=True)
    status = serializers.ChoiceField(
        choices=Status.choices,
        read_only=True,
        allow_null=True,
        help_text="null once the parent was purged (the follow-up is then cancelled).",
    )


#: Most children a task's detail names (the list filter `parent` has them all).
MAX_CHILDREN = 1000


class SubmitterSerializer(serializers.Serializer[Any]):
    """Who submitted a task."""

    kind = serializers.ChoiceField(
        choices=["user", "token", "system"], help_text="A user, an API token, or the system."
    )
    user = serializers.CharField(allow_null=True, help_text="The user's username, if any.")
    token = serializers.CharField(
        help_text="A digest of the API token used (never the token); empty without one."
    )
    name = serializers.CharField(help_text="A display name.")
    description = serializers.CharField()
    admission_key = serializers.CharField(allow_null=True)


def submitter_json(task: Task) -> dict[str, Any]:
    """The submitter of `task` as `SubmitterSerializer` shows it (`system` without a row)."""
    origin = TaskOrigin.objects.using(task._state.db).select_related("user").filter(task=task)
    row = origin.first()
    if row is None:
        return {
            "kind": "system",
            "user": None,
            "token": "",
            "name": "",
            "description": "",
            "admission_key": None,
        }
    return {
        "kind": row.kind,
        "user": row.user.get_username() if row.user is not None else None,
        "token": row.token,
        "name": row.name,
        "description": row.description,
        "admission_key": row.admission_key,
    }


class TaskDetailSerializer(TaskSerializer):
    """A task with the tasks it waits for, and its History, oldest entry first."""

    submitter = serializers.SerializerMethodField(
        help_text="Who submitted the task (a user, an API token, or the system)."
    )

    parents = serializers.SerializerMethodField(
        help_text="A follow-up's parents while it waits for them to complete (`after`), in "
        "the order named; empty for any other task, and once the follow-up was released."
    )
    waiting = serializers.SerializerMethodField(
        help_text="Why a ready task is not running now, each reason `{code, detail, ...}` "
        "(`not_before`, `parents` with the `parents` it still waits for, `paused` (an "
        "operator's pause, with `by` and `since`), `queue_paused`, "
        "`queue_full`, `unserved`, `lock_held`, `limit_full`, `order_waits`, "
        "`rate_exhausted`, `waiting` for a durable sleep or wait with its `wait`, `kind` and "
        "`until`); empty for any other task."
    )
    children = serializers.SerializerMethodField(
        help_text=f"The rns of the tasks this one spawned, oldest first (at most {MAX_CHILDREN}; "
        "`GET /tasks/?parent=<rn>` lists them all)."
    )
    history = HistorySerializer(many=True, read_only=True)
    traceparent = serializers.SerializerMethodField(
        help_text="The W3C trace context of the span that submitted the task (a retry keeps "
        "its chain's first), as the `traceparent` header carries it; null for a task "
        "submitted outside any trace (docs/howto/tracing.md)."
    )
    trace_id = serializers.SerializerMethodField(
        help_text="The trace id of `traceparent` (32 hex digits), to look the trace up."
    )

    class Meta(TaskSerializer.Meta):
        fields = [
            *TaskSerializer.Meta.fields,
            "submitter",
            "parents",
            "children",
            "waiting",
            "history",
            "traceparent",
            "trace_id",
        ]
        read_only_fields = fields

    def stored_traceparent(self, task: Task) -> str | None:
        """The traceparent stored with `task`, read once per task."""
        found: dict[str, str | None] = self.__dict__.setdefault("_traceparents", {})
        if task.rn not in found:
            found[task.rn] = traceparent_of(task._state.db or "default", task.rn)
        return found[task.rn]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_traceparent(self, task: Task) -> str | None:
        return self.stored_traceparent(task)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_trace_id(self, task: Task) -> str | None:
        traceparent = self.stored_traceparent(task)
        return None if traceparent is None else trace_id_of(traceparent)

    @extend_schema_field(SubmitterSerializer)
    def get_submitter(self, task: Task) -> dict[str, Any]:
        """Who submitted `task`."""
        return submitter_json(task)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_children(self, task: Task) -> list[str]:
        """The rns of `task`'s children, oldest first (at most MAX_CHILDREN)."""
        return task.children_rns(MAX_CHILDREN)

    @extend_schema_field(ParentSerializer(many=True))
    def get_parents(self, task: Task) -> list[Any]:
        """The parents `task` waits for, as `{rn, status}`."""
        return list(ParentSerializer(followups.parents(task), many=True).data)

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_waiting(self, task: Task) -> list[dict[str, Any]]:
        """Why `task` waits: `Task.waiting_reasons()`."""
        return task.waiting_reasons()
