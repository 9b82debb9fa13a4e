"""The views of the REST API (docs/howto/http-api.md), one module per kind of resource.

Each parses its input with a serializer and calls the model or manager
method that every other caller uses (`Task.objects.submit`, `task.cancel`, `task.heartbeat`, …);
none of them writes a task itself, and a task is never updated or deleted wholesale.

Status codes: 200, or 201 for a submission or a registration; errors as in `exceptions.py`.
"""

from .base import ScyllaAuthMixin, ScyllaView, get_task, not_found
from .batches import BatchViewSet
from .durable import SignalTokenView
from .events import EventView
from .health import HealthView
from .keys import (
    HoldReleaseView,
    LimitDetailView,
    LimitListView,
    LockView,
    RateDetailView,
    RateListView,
)
from .queues import QueueCapView, QueueLimitView, QueuePauseView, QueueView
from .schedules import ScheduleViewSet
from .schema import SchemaView
from .tasks import TaskViewSet
from .workers import WorkerViewSet

__all__ = [
    "BatchViewSet",
    "EventView",
    "HealthView",
    "HoldReleaseView",
    "LimitDetailView",
    "LimitListView",
    "LockView",
    "QueueCapView",
    "QueueLimitView",
    "QueuePauseView",
    "QueueView",
    "RateDetailView",
    "RateListView",
    "ScheduleViewSet",
    "SchemaView",
    "ScyllaAuthMixin",
    "ScyllaView",
    "SignalTokenView",
    "TaskViewSet",
    "WorkerViewSet",
    "get_task",
    "not_found",
]
