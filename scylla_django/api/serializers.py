"""What the API reads and writes.

JSON shapes use the field names of docs/reference/task.md and docs/howto/http-api.md.

Request serializers only parse and check input, with the validators of `validation.py`; the
views hand the result to the model methods, which validate again and do the writing. Request
serializers reject keys they do not declare (400 `unknown_field`), so a client can never set a
server-owned field (status, owner, deadline, history, errors, leases, created, updated).
Types are strict: `"5"` is not a number, `1` is not a string and `true` is not an integer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from .. import followups
from ..conf import LEASE_MIN
from ..enums import EventType, Liveness, Status
from ..models import (
    MAX_PARENTS,
    CatchUp,
    Event,
    FiringOutcome,
    History,
    Schedule,
    Task,
    TaskDeletion,
    TaskOrigin,
    WaitingRun,
    Worker,
    steps,
    task_pauses,
)
from ..models.children import MAX_SPAWNED
from ..models.key_control import MAX_LIMIT
from ..models.keys import RATE_PATTERN, described, parse_rate
from ..models.traces import trace_id_of, traceparent_of
from ..notify import URL_MAX_LENGTH
from ..retries import MAX_DELAY as MAX_RETRY_DELAY
from ..schedules import DEFINITION_KEYS as SCHEDULE_KEYS
from ..schedules import events
from ..schedules.firings import latest_firings, why_not
from ..schedules.triggers import SINCE_ALL, SINCE_CHANGE
from ..text import positive_duration
from ..validation import (
    KEY_NAME_MAX_LENGTH,
    ON_CONFLICT,
    ORDER_ON_FAILURE,
    QUEUE_MAX_LENGTH,
    RN_MAX_LENGTH,
    UNIQUE_KEY_MAX_LENGTH,
    queue_validator,
    rn_validator,
    schedule_name_validator,
    validate_json,
)

WORKER_NAME_MAX_LENGTH = 64
FIRST_INSTANT = datetime.min.replace(tzinfo=UTC)
LAST_INSTANT = datetime.max.replace(microsecond=0, tzinfo=UTC)
MAX_LEASE_LIMIT = 100
MAX_LEASE_SECONDS = 10**9
MAX_CANCEL_RNS = 10_000
MAX_BATCH_ITEMS = 10_000


# -- strict fields --------------------------------------------------------------------------


class StrictCharField(serializers.CharField):
    """A string, never a number or a boolean turned into one; whitespace is kept."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        if not kwargs.get("allow_blank", False):
            kwargs.setdefault("min_length", 1)  # so that the schema says what "blank" refuses
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: not a boolean, a float or a string of digits."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A finite JSON number: not a boolean or a string."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


def clamp_utc(value: datetime) -> datetime:
    """`value` in UTC; an instant beyond the years 1..9999 in UTC becomes the nearest end.

    `0001-01-01T00:00:00+01:00` is valid ISO 8601, but falls before the first instant Python
    can represent in UTC. As a bound (a filter, a delayed start) the nearest end means the same.
    The last instant is a whole second: SQLite's date functions reject 9999-12-31 23:59:59.9999.
    """
    try:
        return min(value.astimezone(UTC), LAST_INSTANT)
    except OverflowError:
        return FIRST_INSTANT if value.year == 1 else LAST_INSTANT


class UTCDateTimeField(serializers.DateTimeField):
    """An ISO 8601 timestamp, in UTC (see `clamp_utc`); one without an offset is local time."""

    def enforce_timezone(self, value: datetime) -> datetime:
        return clamp_utc(timezone.make_aware(value) if timezone.is_naive(value) else value)


class JSONValueField(serializers.JSONField):
    """Any JSON document the scheduler can store (`validation.validate_json`).

    No NUL characters, NaN or nesting past 64 levels, and at most `SCYLLA['SPEC_SIZE_LIMIT']`
    bytes of compact JSON (else code `too_large`).
    """

    def to_internal_value(self, data: Any) -> Any:
        return validate_json(data, self.field_name or "value", allow_null=self.allow_null)


class StrictSerializer(serializers.Serializer[Any]):
    """A request body: a JSON object with only the declared keys (else 400 `unknown_field`)."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = {
            key: [ErrorDetail(_("Unknown field."), code="unknown_field")]
            for key in (data if isinstance(data, Mapping) else ())
            if key not in self.fields
        }
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


def rn_field(**kwargs: Any) -> StrictCharField:
    """A task's rn."""
    return StrictCharField(max_length=RN_MAX_LENGTH, validators=[rn_validator], **kwargs)


def queue_field(**kwargs: Any) -> StrictCharField:
    """A queue's name."""
    return StrictCharField(max_length=QUEUE_MAX_LENGTH, validators=[queue_validator], **kwargs)


def worker_field() -> StrictCharField:
    """The `worker` of a worker operation: the name `POST /workers/` gave it."""
    return StrictCharField(
        max_length=WORKER_NAME_MAX_LENGTH, help_text="The acting worker's name, `worker-<n>`."
    )


# -- tasks ----------------------------------------------------------------------------------


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
    """A task's own `not_before`: for a follow-up waiting for its parents or a task on an
    operator's hold, the delayed start it takes once released (null: none), never the far-off
    date that holds it meanwhile."""

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


@extend_schema_field({"type": "number", "nullable": True})
class SecondsField(serializers.ReadOnlyField):
    """A duration, written as a number of seconds."""

    def to_representation(self, value: Any) -> Any:
        return None if value is None else float(value.total_seconds())


KEY_NAME_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": KEY_NAME_MAX_LENGTH,
}
LOCK_SCHEMA: dict[str, Any] = {
    "oneOf": [
        KEY_NAME_SCHEMA,
        {
            "type": "array",
            "items": KEY_NAME_SCHEMA,
            "minItems": 2,
            "maxItems": 2,
            "description": 'A pair `[name, mode]`, the mode "exclusive" or "shared".',
        },
    ]
}


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


class TaskDeletionSerializer(serializers.ModelSerializer[TaskDeletion]):
    """The record of a deleted task: what it was, when and by whom it was deleted, and its
    History (each entry as in a task's `history`, closed by a `TaskDeletion` entry)."""

    spec = JSONValueField(read_only=True)
    history = serializers.ListField(child=serializers.DictField(), read_only=True)

    class Meta:
        model = TaskDeletion
        fields = ["rn", "queue", "spec", "priority", "created", "deleted", "by", "history"]
        read_only_fields = fields


class RetryPolicySerializer(StrictSerializer):
    """A retry policy: when an aborted task is followed by a new one, and after how long."""

    max_attempts = StrictIntegerField(
        required=False, min_value=1, max_value=1000, help_text="Tasks in the chain at most (3)."
    )
    backoff = serializers.ChoiceField(choices=["exponential", "fixed"], required=False)
    delay = StrictFloatField(
        required=False,
        min_value=0,
        max_value=MAX_RETRY_DELAY,
        help_text="Seconds: the first wait (exponential, 1) or every wait (fixed, 10).",
    )
    base = StrictFloatField(required=False, min_value=1, max_value=MAX_RETRY_DELAY)
    cap = StrictFloatField(required=False, min_value=0, max_value=MAX_RETRY_DELAY)
    jitter = serializers.BooleanField(required=False)
    on = serializers.ListField(
        child=StrictCharField(max_length=200),
        required=False,
        max_length=50,
        help_text="Dotted names of the exception classes retried (all when omitted).",
    )
    codes = serializers.ListField(
        child=StrictCharField(max_length=200),
        required=False,
        max_length=50,
        help_text="Abort codes retried too.",
    )
    timeouts = serializers.BooleanField(
        required=False,
        help_text="Retry a task aborted at its run-time limit (the code `timeout`); true when "
        "omitted.",
    )
    crashes = serializers.BooleanField(
        required=False,
        help_text="Retry a task whose runs ended with no outcome from its handler (its worker "
        "or child process died, froze or lost its lease) `MAX_LEASES` times (the code "
        "`max_leases_exceeded`); true when omitted.",
    )
    resume = serializers.BooleanField(
        required=False,
        help_text="A retry resumes where the task it follows stopped: it is given that task's "
        "completed steps, cursor and ended waits; false when omitted (a retry starts over).",
    )


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": UNIQUE_KEY_MAX_LENGTH})
class UniqueKeyField(serializers.Field):  # type: ignore[type-arg]
    """A unique key, passed on as sent: `Task.objects.submit` checks it (a 400 with the code
    `invalid_unique_key`), by the one rule of `validation.validate_unique_key`."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field({"type": "array", "items": LOCK_SCHEMA})
class LocksField(serializers.Field):  # type: ignore[type-arg]
    """The locks of a submission, passed on as sent: the submission checks them (400
    `invalid_key`)."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field({"type": "array", "items": KEY_NAME_SCHEMA})
class LimitsField(LocksField):
    """The limits of a submission, passed on as sent: the submission checks them (400
    `invalid_key`, `unknown_limit`)."""


@extend_schema_field(KEY_NAME_SCHEMA)
class KeyNameField(LocksField):
    """An order key or a rate's name, passed on as sent: the submission checks it (400
    `invalid_key`, `unknown_rate`)."""


@extend_schema_field({"type": "string", "enum": list(ON_CONFLICT)})
class OnConflictField(LocksField):
    """A submission's `on_conflict`, passed on as sent: the submission checks it (400
    `invalid_on_conflict`, as from Python)."""


@extend_schema_field({"type": "string", "enum": list(ORDER_ON_FAILURE)})
class OrderOnFailureField(LocksField):
    """A submission's `order_on_failure`, passed on as sent: the submission checks it (400
    `invalid_key`, as any bad key field, and as from Python)."""


# A duration as text over HTTP: a whole number from 1 to 999 and a unit. The schema states
# exactly what is accepted, so a client (or a fuzzer) that follows it is never refused.
DURATION_TEXT = r"^[1-9][0-9]{0,2}(ms|s|m|h|d|w)$"
# A lease or an interval as text: the same without milliseconds (a lease lasts at least 1 s).
LEASE_TEXT = r"^[1-9][0-9]{0,2}(s|m|h|d|w)$"


def duration_schema(minimum: float, pattern: str) -> dict[str, Any]:
    """The OpenAPI schema of a duration field: seconds from `minimum`, or text."""
    number: dict[str, Any] = {"type": "number", "maximum": MAX_LEASE_SECONDS}
    number.update({"minimum": minimum} if minimum else {"minimum": 0, "exclusiveMinimum": True})
    return {"oneOf": [number, {"type": "string", "pattern": pattern}]}


@extend_schema_field(duration_schema(0, DURATION_TEXT))
class DurationInputField(serializers.Field):  # type: ignore[type-arg]
    """A duration sent as seconds (a number above 0) or as text: a whole number from 1 to 999
    and a unit (`500ms`, `30s`, `5m`, `1h`, `7d`, `2w`); passed on as sent, for the submission
    to read with the project's duration rule. Anything else is refused with `error_code`."""

    minimum = 0.0
    pattern = DURATION_TEXT
    units = "500ms, 30s, 5m, 1h, 7d, 2w"

    def __init__(self, *, error_code: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error_code = error_code

    def to_internal_value(self, data: Any) -> Any:
        number = isinstance(data, int | float) and not isinstance(data, bool)
        low = self.minimum
        if (number and (low <= data if low else 0 < data) and data <= MAX_LEASE_SECONDS) or (
            isinstance(data, str) and re.match(self.pattern, data)
        ):
            return data
        above = _("of at least %(low)s") % {"low": f"{low:g}"} if low else _("above 0")
        raise serializers.ValidationError(
            _(
                "A duration is a number of seconds %(above)s, or a whole number from 1 to 999 "
                "and a unit: %(units)s."
            )
            % {"above": above, "units": self.units},
            code=self.error_code,
        )

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(duration_schema(LEASE_MIN.total_seconds(), LEASE_TEXT))
class LeaseLengthField(DurationInputField):
    """A lease length: seconds from `LEASE_MIN` (1 s), or text such as `30s` or `5m`; the
    seconds as a number."""

    minimum = LEASE_MIN.total_seconds()
    pattern = LEASE_TEXT
    units = "30s, 5m, 1h, 7d, 2w"

    def to_internal_value(self, data: Any) -> Any:
        return positive_duration(super().to_internal_value(data)).total_seconds()


@extend_schema_field(duration_schema(0.001, LEASE_TEXT))
class IntervalField(DurationInputField):
    """An interval: seconds from 0.001, or text such as `10s`; the seconds as a number."""

    minimum = 0.001
    pattern = LEASE_TEXT
    units = "10s, 5m, 1h, 7d, 2w"

    def to_internal_value(self, data: Any) -> Any:
        return positive_duration(super().to_internal_value(data)).total_seconds()


class SubmitSerializer(StrictSerializer):
    """A task to submit: `queue` and `spec`, optionally `rn`, `priority`, `not_before`, a
    retry policy, a unique key and the keys the lease takes (locks, limits, order, rate)."""

    rn = rn_field(
        required=False,
        help_text="Your id for the task (idempotent submission); a UUID when omitted.",
    )
    queue = queue_field()
    spec = JSONValueField(help_text="Any JSON but null, opaque to the scheduler.")
    priority = StrictIntegerField(
        required=False, min_value=0, max_value=255, help_text="0..255, higher first."
    )
    not_before = UTCDateTimeField(
        required=False, allow_null=True, help_text="Not leased before this time."
    )
    retry = RetryPolicySerializer(
        required=False,
        allow_null=True,
        help_text="The task's retry policy (overrides its handler's).",
    )
    after = serializers.ListField(
        child=rn_field(),
        required=False,
        min_length=1,
        max_length=MAX_PARENTS,
        help_text="Rns of tasks that must all complete first (a follow-up task; not in bulk).",
    )
    unique_key = UniqueKeyField(
        required=False,
        help_text="At most one ready or running task holds this key (docs/howto/keys.md).",
    )
    unique_window = DurationInputField(
        error_code="invalid_unique_window",
        required=False,
        help_text="And none within this long after the last one finished (seconds or '1h').",
    )
    on_conflict = OnConflictField(
        required=False,
        help_text=(
            "When the key is held: `return` the holder (200, the default), `raise` (409 "
            "`duplicate`) or `replace` a still-ready holder's spec, priority and not_before."
        ),
    )
    locks = LocksField(
        required=False,
        help_text=(
            'Locks the lease takes: names (exclusive) or `[name, "shared"]` pairs. A name is '
            f"1 to {KEY_NAME_MAX_LENGTH} characters; one named in both modes is a 400 "
            "`invalid_key`."
        ),
    )
    limits = LimitsField(
        required=False,
        help_text="Limits the task takes a slot of; an unknown one is a 400 `unknown_limit`.",
    )
    order_key = KeyNameField(
        required=False, help_text="The key's tasks run one at a time, in submit order."
    )
    order_on_failure = OrderOnFailureField(
        required=False,
        help_text="With `order_key`: whether an abort for good holds the key (`block`, the "
        "default) or the next task runs (`continue`).",
    )
    rate_key = KeyNameField(
        required=False,
        help_text="The rate the task's start counts against; an unknown one is a 400 "
        "`unknown_rate`.",
    )
    fair_key = KeyNameField(
        required=False,
        help_text="The task's value of the key its queue shares its capacity by (a tenant): "
        "within a priority the lease takes the values' tasks in turn (docs/howto/fairness.md).",
    )
    timeout = DurationInputField(
        error_code="invalid_timeout",
        required=False,
        help_text="Run-time limit (seconds or '5m'): past it the task is stopped, then "
        "aborted with `timeout` (docs/howto/timeouts.md).",
    )
    expires_in = DurationInputField(
        error_code="invalid_expires_in",
        required=False,
        help_text="Cancelled (`expired`) if not started within this long (seconds or '1h').",
    )
    expires_at = UTCDateTimeField(
        required=False,
        allow_null=True,
        help_text="Cancelled (`expired`) if not started by then; in the future.",
    )
    notify = serializers.CharField(
        required=False,
        allow_null=True,
        trim_whitespace=False,
        min_length=1,
        max_length=URL_MAX_LENGTH,
        help_text="An https:// URL that the task's outcome is POSTed to, signed, once it is "
        "final (docs/howto/notifications.md); anything else is a 400 `invalid_notify`.",
    )
    admission_key = KeyNameField(
        required=False,
        allow_null=True,
        help_text="The admission key the task counts against (`SCYLLA['MAX_READY']` may cap "
        "its ready tasks, docs/howto/admission.md).",
    )
    on_full = serializers.ChoiceField(
        choices=["reject", "shed_oldest"],
        required=False,
        allow_null=True,
        help_text="When a cap on ready tasks is reached: `reject` (429 `queue_full`) or "
        "`shed_oldest` (the oldest ready task is cancelled with the code `shed`); the cap's "
        "own choice when omitted.",
    )
    submitter_name = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=150,
        help_text="A display name for who submitted the task (else the user's name).",
    )
    submitter_description = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=1000,
        help_text="A description of the submission.",
    )


class FieldErrorSerializer(serializers.Serializer[Any]):
    """One problem with one field."""

    code = serializers.CharField()
    detail = serializers.CharField()


class BulkOutcomeSerializer(serializers.Serializer[Any]):
    """What happened to one item of a bulk submission."""

    index = serializers.IntegerField(help_text="The item's position in the request.")
    rn = serializers.CharField(allow_null=True)
    outcome = serializers.ChoiceField(
        choices=["inserted", "duplicate", "replaced", "invalid", "full"],
        help_text="`full`: a cap on ready tasks refused the item (docs/howto/admission.md).",
    )
    errors = serializers.DictField(  # type: ignore[assignment]  # see TaskSerializer
        child=FieldErrorSerializer(many=True),
        help_text="An invalid item's errors per field, as in a 400 response.",
    )


class CancelSerializer(StrictSerializer):
    """A cancellation has no parameters: the body is empty or `{}`."""


class BulkCancelSerializer(StrictSerializer):
    """What `POST /bulk/tasks/cancel/` cancels: `filter` (the list's filters) or `rns`, not both."""

    filter = serializers.DictField(required=False)
    rns = serializers.ListField(
        child=rn_field(),
        required=False,
        min_length=1,
        max_length=MAX_CANCEL_RNS,
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("filter" in attrs) == ("rns" in attrs):
            raise serializers.ValidationError(
                ErrorDetail(_("Give either `filter` or `rns`."), code="invalid")
            )
        return attrs


class CancelledSerializer(serializers.Serializer[Any]):
    """What `POST /bulk/tasks/cancel/` did."""

    cancelled = serializers.IntegerField(help_text="Ready or running tasks now cancelled.")
    skipped = serializers.IntegerField(help_text="Selected tasks that were already finished.")
    not_found = serializers.IntegerField(help_text="Given rns that name no task.")


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


# -- workers and queues ---------------------------------------------------------------------


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


# -- errors (for the schema) ----------------------------------------------------------------


class ErrorSerializer(serializers.Serializer[Any]):
    """Every error response: a machine-readable `code` and a human-readable `detail`."""

    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.DictField(  # type: ignore[assignment]  # see TaskSerializer
        child=FieldErrorSerializer(many=True),
        required=False,
        help_text="400 only: the errors of each field, by field name or path.",
    )


# -- operations -----------------------------------------------------------------------------


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


class ResetLeaseSerializer(StrictSerializer):
    """The lease to reset, as the operator saw it: its owner and lease number."""

    owner = worker_field()
    lease = StrictIntegerField(min_value=1, max_value=2**31 - 1)


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


# -- retries and schedules ----------------------------------------------------------------


class AbortedSerializer(TaskSerializer):
    """An aborted task, and the retry submitted with the abort (null if none)."""

    successor = serializers.CharField(
        read_only=True, allow_null=True, help_text="The rn of the retry, if one was submitted."
    )

    class Meta(TaskSerializer.Meta):
        fields = [*TaskSerializer.Meta.fields, "successor"]
        read_only_fields = fields


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


class EventOutSerializer(serializers.Serializer[Any]):
    """An event: its `kind`, `payload` and the database's `time` of its writing."""

    id = serializers.IntegerField()
    kind = serializers.CharField()
    payload = serializers.JSONField()
    time = serializers.DateTimeField()


class EventSerializer(EventOutSerializer):
    """An event of `GET /events/`, with the schedules whose firings consumed it."""

    consumed_by = serializers.SerializerMethodField(
        help_text="The names of the schedules whose firings consumed this event (empty: none "
        "yet), in the order they consumed it."
    )

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_consumed_by(self, event: Event) -> list[str]:
        return [c.schedule.name for c in event.consumptions.all()]


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


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObjectField(JSONValueField):
    """A JSON object (an event's payload)."""


class EventInputSerializer(StrictSerializer):
    """`POST /events/`: an event to emit."""

    kind = StrictCharField(
        max_length=200, validators=[RegexValidator(events.KIND_PATTERN, code="invalid_kind")]
    )
    payload = JSONObjectField(required=False)

    def validate_kind(self, value: str) -> Any:
        return _checked(events.validate_kind, value)

    def validate_payload(self, value: Any) -> Any:
        return _checked(events.validate_payload, value)


def _checked(validator: Any, value: Any) -> Any:
    """`validator(value)`, its Django ValidationError as the serializer's, with its code."""
    try:
        return validator(value)
    except DjangoValidationError as exc:
        raise serializers.ValidationError(exc.messages, code=exc.code) from None


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


# -- keys -----------------------------------------------------------------------------------


class LockHeldSerializer(serializers.Serializer[Any]):
    """A lock held now: by a running task (`holder`) or by a hold of code outside tasks
    (`hold`, the token an operator force-releases)."""

    key = serializers.CharField()
    mode = serializers.ChoiceField(choices=["exclusive", "shared"])
    holder = serializers.CharField(allow_null=True, help_text="The rn of the running task.")
    hold = serializers.IntegerField(allow_null=True, help_text="The hold's token.")
    since = serializers.DateTimeField(
        allow_null=True, help_text="The task's lease, or the hold's taking."
    )
    expires = serializers.DateTimeField(
        allow_null=True,
        help_text="The task's lease deadline, or the hold's end (null: until released).",
    )


class LimitSerializer(serializers.Serializer[Any]):
    """A limit: at most `max_running` running tasks hold one of its slots; `running` now."""

    name = serializers.CharField()
    max_running = serializers.IntegerField()
    running = serializers.IntegerField(help_text="Running tasks holding a slot now.")
    configured = serializers.BooleanField(
        help_text="Its size is the one SCYLLA['LIMITS'] gives (false: set at runtime, or not "
        "in the settings)."
    )


class RateSerializer(serializers.Serializer[Any]):
    """A rate: at most `count` starts in any `seconds`; `starts` within the last `seconds`."""

    name = serializers.CharField()
    rate = serializers.CharField(source="text", help_text='As settings write it: "100/m".')
    count = serializers.IntegerField()
    seconds = serializers.FloatField()
    starts = serializers.IntegerField(help_text="Starts within the last `seconds` now.")
    configured = serializers.BooleanField(
        help_text="It is the rate SCYLLA['RATES'] gives (false: set at runtime, or not in the "
        "settings)."
    )


def key_name_field(**kwargs: Any) -> StrictCharField:
    """The name of a lock, limit, order key or rate."""
    return StrictCharField(max_length=KEY_NAME_MAX_LENGTH, **kwargs)


class LimitInputSerializer(StrictSerializer):
    """`POST /limits/`: a limit to make or change."""

    name = key_name_field()
    max_running = StrictIntegerField(min_value=1, max_value=MAX_LIMIT)


class LimitChangeSerializer(StrictSerializer):
    """`PATCH /limits/{name}/`: the limit's new size."""

    max_running = StrictIntegerField(min_value=1, max_value=MAX_LIMIT)


@extend_schema_field({"type": "string", "pattern": RATE_PATTERN, "minLength": 1, "maxLength": 20})
class RateField(serializers.Field):  # type: ignore[type-arg]
    """A rate as settings write it: "100/m", "5/10s". Anything else is a 400 `invalid_rate`
    with the message `key_control.set_rate` gives from Python (`keys.parse_rate`)."""

    def to_internal_value(self, data: Any) -> str:
        try:
            parse_rate(data)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages, code="invalid_rate") from None
        return str(data)

    def to_representation(self, value: Any) -> Any:
        return value


def rate_field() -> RateField:
    """A rate as settings write it: "100/m", "5/10s"."""
    return RateField(
        help_text='"<count>/<period>", the period s, m, h or d with an optional number: '
        '"100/m", "5/10s".',
    )


class RateInputSerializer(StrictSerializer):
    """`POST /rates/`: a rate to make or change."""

    name = key_name_field()
    rate = rate_field()


class RateChangeSerializer(StrictSerializer):
    """`PATCH /rates/{name}/`: the rate's new count and period."""

    rate = rate_field()


class ReleasedSerializer(serializers.Serializer[Any]):
    """`POST /holds/{token}/release/`: the hold is gone."""

    hold = serializers.IntegerField()
    released = serializers.BooleanField()


# -- batches ---------------------------------------------------------------------------------


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


# -- durable execution (docs/howto/durable.md) ------------------------------------------------


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
        return _checked(steps.validate_name, value)


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
        return _checked(steps.validate_name, value)

    def validate_signal(self, value: str) -> Any:
        return _checked(steps.validate_name, value)

    def validate_event_kind(self, value: str) -> Any:
        return _checked(events.validate_kind, value)

    def validate_match(self, value: Any) -> Any:
        return _checked(events.validate_match, value)


class WaitAnswerSerializer(serializers.Serializer[Any]):
    """The wait as it stands, and whether the task was parked (the run must end)."""

    parked = serializers.BooleanField()
    wait = WaitSerializer()


class SignalInputSerializer(StrictSerializer):
    """A signal's payload (any JSON, null by default)."""

    payload = JSONValueField(required=False, allow_null=True, default=None)
