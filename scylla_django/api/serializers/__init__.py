"""What the API reads and writes, one module per resource (as `views/` is):

- `base`: the strict fields and the request body every other module builds on;
- `durations`: durations as seconds or text (`30s`, `5m`);
- `errors`: the body of every error response;
- `tasks`: a task as the API shows it, with its History, parents, children and submitter;
- `submission`: a task to submit, its retry policy and keys, a bulk submission's outcomes;
- `cancellation`: cancelling many tasks;
- `leases`: the operations of the worker that holds a task's lease;
- `repairs` and `task_control`: an operator's repairs and control of one task;
- `forecast`: when a ready task is expected to start;
- `durable`: steps, cursor, waits and signals (durable execution);
- `workers`, `queues`, `keys`, `batches`, `schedules`, `events`, `health`: those resources.

JSON shapes use the field names of docs/reference/task.md and docs/howto/http-api.md.

Request serializers only parse and check input, with the validators of `validation.py`; the
views hand the result to the model methods, which validate again and do the writing. Request
serializers reject keys they do not declare (400 `unknown_field`), so a client can never set a
server-owned field (status, owner, deadline, history, errors, leases, created, updated).
Types are strict: `"5"` is not a number, `1` is not a string and `true` is not an integer.

Every name is importable from this package, as from the module it lives in.
"""

from __future__ import annotations

from .base import (
    FIRST_INSTANT,
    LAST_INSTANT,
    WORKER_NAME_MAX_LENGTH,
    CancelSerializer,
    JSONObjectField,
    JSONValueField,
    SecondsField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    UTCDateTimeField,
    clamp_utc,
    queue_field,
    rn_field,
    worker_field,
)
from .batches import (
    BATCH_STATES,
    MAX_BATCH_ITEMS,
    BatchResultSerializer,
    BatchResultsSerializer,
    BatchSerializer,
    BatchSubmitSerializer,
    BatchSubmittedSerializer,
    BatchTaskSerializer,
    CallbackSerializer,
)
from .cancellation import (
    MAX_CANCEL_RNS,
    BulkCancelSerializer,
    CancelledSerializer,
)
from .durable import (
    NAME_VALIDATOR,
    CheckpointInputSerializer,
    DurableSerializer,
    SignalInputSerializer,
    SignalSerializer,
    StepInputSerializer,
    StepSerializer,
    WaitAnswerSerializer,
    WaitInputSerializer,
    WaitSerializer,
)
from .durations import (
    DURATION_TEXT,
    LEASE_TEXT,
    MAX_LEASE_SECONDS,
    DurationInputField,
    IntervalField,
    LeaseLengthField,
    duration_schema,
)
from .errors import (
    ErrorSerializer,
    FieldErrorSerializer,
)
from .events import (
    EventInputSerializer,
    EventOutSerializer,
    EventSerializer,
)
from .forecast import (
    ForecastSerializer,
    RuleSerializer,
)
from .health import (
    HealthCheckSerializer,
    HealthQuerySerializer,
    HealthSerializer,
)
from .keys import (
    LimitChangeSerializer,
    LimitInputSerializer,
    LimitSerializer,
    LockHeldSerializer,
    RateChangeSerializer,
    RateField,
    RateInputSerializer,
    RateSerializer,
    ReleasedSerializer,
    key_name_field,
    rate_field,
)
from .leases import (
    AbortedSerializer,
    AbortSerializer,
    ChildSerializer,
    CompleteSerializer,
    HeartbeatSerializer,
    SnoozeSerializer,
    WorkerActionSerializer,
)
from .queues import (
    QueueCapSerializer,
    QueueLimitSerializer,
    QueueSerializer,
    QueueSettingSerializer,
)
from .repairs import (
    ResetLeaseSerializer,
)
from .schedules import (
    CalendarEntrySerializer,
    DelayedSerializer,
    FiringSerializer,
    ScheduleDetailSerializer,
    ScheduleInputSerializer,
    ScheduleSerializer,
    TriggerWhySerializer,
    UnmetSerializer,
    WaitingSerializer,
    WhySerializer,
    seconds,
)
from .submission import (
    KEY_NAME_SCHEMA,
    LOCK_SCHEMA,
    BulkOutcomeSerializer,
    KeyNameField,
    LimitsField,
    LocksField,
    OnConflictField,
    OrderOnFailureField,
    RetryPolicySerializer,
    SubmitSerializer,
    UniqueKeyField,
)
from .task_control import (
    TaskDeletionSerializer,
)
from .tasks import (
    MAX_CHILDREN,
    HistorySerializer,
    KeyPartField,
    NotBeforeField,
    ParentSerializer,
    SubmitterSerializer,
    TaskDetailSerializer,
    TaskErrorSerializer,
    TaskListSerializer,
    TaskSerializer,
    key_part,
    not_blank,
    own_not_before,
    submitter_json,
)
from .workers import (
    MAX_LEASE_LIMIT,
    LeasedSerializer,
    LeaseSerializer,
    RegisterSerializer,
    WorkerDetailSerializer,
    WorkerSerializer,
    WorkerStateSerializer,
    queues_field,
)

__all__ = [
    "BATCH_STATES",
    "DURATION_TEXT",
    "FIRST_INSTANT",
    "KEY_NAME_SCHEMA",
    "LAST_INSTANT",
    "LEASE_TEXT",
    "LOCK_SCHEMA",
    "MAX_BATCH_ITEMS",
    "MAX_CANCEL_RNS",
    "MAX_CHILDREN",
    "MAX_LEASE_LIMIT",
    "MAX_LEASE_SECONDS",
    "NAME_VALIDATOR",
    "WORKER_NAME_MAX_LENGTH",
    "AbortSerializer",
    "AbortedSerializer",
    "BatchResultSerializer",
    "BatchResultsSerializer",
    "BatchSerializer",
    "BatchSubmitSerializer",
    "BatchSubmittedSerializer",
    "BatchTaskSerializer",
    "BulkCancelSerializer",
    "BulkOutcomeSerializer",
    "CalendarEntrySerializer",
    "CallbackSerializer",
    "CancelSerializer",
    "CancelledSerializer",
    "CheckpointInputSerializer",
    "ChildSerializer",
    "CompleteSerializer",
    "DelayedSerializer",
    "DurableSerializer",
    "DurationInputField",
    "ErrorSerializer",
    "EventInputSerializer",
    "EventOutSerializer",
    "EventSerializer",
    "FieldErrorSerializer",
    "FiringSerializer",
    "ForecastSerializer",
    "HealthCheckSerializer",
    "HealthQuerySerializer",
    "HealthSerializer",
    "HeartbeatSerializer",
    "HistorySerializer",
    "IntervalField",
    "JSONObjectField",
    "JSONValueField",
    "KeyNameField",
    "KeyPartField",
    "LeaseLengthField",
    "LeaseSerializer",
    "LeasedSerializer",
    "LimitChangeSerializer",
    "LimitInputSerializer",
    "LimitSerializer",
    "LimitsField",
    "LockHeldSerializer",
    "LocksField",
    "NotBeforeField",
    "OnConflictField",
    "OrderOnFailureField",
    "ParentSerializer",
    "QueueCapSerializer",
    "QueueLimitSerializer",
    "QueueSerializer",
    "QueueSettingSerializer",
    "RateChangeSerializer",
    "RateField",
    "RateInputSerializer",
    "RateSerializer",
    "RegisterSerializer",
    "ReleasedSerializer",
    "ResetLeaseSerializer",
    "RetryPolicySerializer",
    "RuleSerializer",
    "ScheduleDetailSerializer",
    "ScheduleInputSerializer",
    "ScheduleSerializer",
    "SecondsField",
    "SignalInputSerializer",
    "SignalSerializer",
    "SnoozeSerializer",
    "StepInputSerializer",
    "StepSerializer",
    "StrictCharField",
    "StrictFloatField",
    "StrictIntegerField",
    "StrictSerializer",
    "SubmitSerializer",
    "SubmitterSerializer",
    "TaskDeletionSerializer",
    "TaskDetailSerializer",
    "TaskErrorSerializer",
    "TaskListSerializer",
    "TaskSerializer",
    "TriggerWhySerializer",
    "UTCDateTimeField",
    "UniqueKeyField",
    "UnmetSerializer",
    "WaitAnswerSerializer",
    "WaitInputSerializer",
    "WaitSerializer",
    "WaitingSerializer",
    "WhySerializer",
    "WorkerActionSerializer",
    "WorkerDetailSerializer",
    "WorkerSerializer",
    "WorkerStateSerializer",
    "clamp_utc",
    "duration_schema",
    "key_name_field",
    "key_part",
    "not_blank",
    "own_not_before",
    "queue_field",
    "queues_field",
    "rate_field",
    "rn_field",
    "seconds",
    "submitter_json",
    "worker_field",
]
