"""The app's models: tasks and their History, workers and monitors, queue settings,
dependencies, schedules and queue rollups. Import them from here:
`from scylla_django.models import Task`.
"""

from ..db import NOT_YIELDED
from . import key_control, task_pauses
from .batches import CALLBACKS, Batch, BatchQuerySet, count_finished, count_requeued
from .deletions import TaskDeletion
from .dependencies import AFTER_PARENTS, MAX_PARENTS, Dependency
from .events import Consumption, Event, Firing, FiringOutcome, Watermark
from .history import History
from .inputs import SubmitDefaults, SubmitOutcome, TaskOptions, new_rn
from .keys import Hold, Key, Limit, LockNotFree, Rate
from .notices import send_each_on_commit, send_on_commit
from .origins import Submitter, TaskOrigin
from .outcomes import Outcome
from .processes import (
    MONITOR_PREFIX,
    WORKER_PREFIX,
    LivenessQuerySet,
    Monitor,
    MonitorQuerySet,
    MonitorStatus,
    RegisteredProcess,
    Worker,
    WorkerQuerySet,
    required_worker_id,
    worker_name,
)
from .queues import (
    SCHEDULED,
    QueueSetting,
    QueueSettingQuerySet,
    QueueSummary,
    validate_max_running,
)
from .rollups import (
    SETTLED,
    QueueRollup,
    QueueRollupQuerySet,
    Tallies,
    Tally,
    first_lease,
    tally_history,
    wait_to_start,
)
from .schedules import CatchUp, OnTimeout, Schedule, WhenUnmet
from .steps import Step
from .tables import queue_tables
from .task import TABLES, Task, TaskQuerySet
from .task_pauses import PAUSED, TaskPause
from .traces import TaskTrace
from .waiting import WaitingRun
from .waits import PARKED, TaskSignal, Wait, WaitKind, WaitOutcome

__all__ = [
    "AFTER_PARENTS",
    "CALLBACKS",
    "MAX_PARENTS",
    "MONITOR_PREFIX",
    "NOT_YIELDED",
    "PARKED",
    "PAUSED",
    "SCHEDULED",
    "SETTLED",
    "TABLES",
    "WORKER_PREFIX",
    "Batch",
    "BatchQuerySet",
    "CatchUp",
    "Consumption",
    "Dependency",
    "Event",
    "Firing",
    "FiringOutcome",
    "History",
    "Hold",
    "Key",
    "Limit",
    "LivenessQuerySet",
    "LockNotFree",
    "Monitor",
    "MonitorQuerySet",
    "MonitorStatus",
    "OnTimeout",
    "Outcome",
    "QueueRollup",
    "QueueRollupQuerySet",
    "QueueSetting",
    "QueueSettingQuerySet",
    "QueueSummary",
    "Rate",
    "RegisteredProcess",
    "Schedule",
    "Step",
    "SubmitDefaults",
    "SubmitOutcome",
    "Submitter",
    "Tallies",
    "Tally",
    "Task",
    "TaskDeletion",
    "TaskOptions",
    "TaskOrigin",
    "TaskPause",
    "TaskQuerySet",
    "TaskSignal",
    "TaskTrace",
    "Wait",
    "WaitKind",
    "WaitOutcome",
    "WaitingRun",
    "Watermark",
    "WhenUnmet",
    "Worker",
    "WorkerQuerySet",
    "count_finished",
    "count_requeued",
    "first_lease",
    "key_control",
    "new_rn",
    "queue_tables",
    "required_worker_id",
    "send_each_on_commit",
    "send_on_commit",
    "tally_history",
    "task_pauses",
    "validate_max_running",
    "wait_to_start",
    "worker_name",
]
