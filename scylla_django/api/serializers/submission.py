"""A task to submit (`POST /tasks/`, one item of `POST /bulk/tasks/`): its retry policy, its
keys and durations, and what became of each item of a bulk submission."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...models import MAX_PARENTS
from ...notify import URL_MAX_LENGTH
from ...retries import MAX_DELAY as MAX_RETRY_DELAY
from ...validation import (
    KEY_NAME_MAX_LENGTH,
    ON_CONFLICT,
    ORDER_ON_FAILURE,
    UNIQUE_KEY_MAX_LENGTH,
)
from .base import (
    JSONValueField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    UTCDateTimeField,
    queue_field,
    rn_field,
)
from .durations import DurationInputField
from .errors import FieldErrorSerializer

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
    # Strict: kept as sent (DRF's trimming ran before the length check, so 151 characters
    # whose first was a control character passed a maxLength of 150).
    submitter_name = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=150,
        help_text="A display name for who submitted the task (else the user's name).",
    )
    submitter_description = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=1000,
        help_text="A description of the submission.",
    )


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
