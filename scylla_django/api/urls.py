"""Routes of the API. Include them under a prefix of your choice:

    path("api/scylla/", include("scylla_django.api.urls"))

Route names are namespaced `scylla:` (e.g. `scylla:task-detail`, `scylla:task-bulk`,
`scylla:schema`).
"""

from __future__ import annotations

from typing import Any

from django.urls import URLPattern, URLResolver, path, re_path
from rest_framework.routers import SimpleRouter

from .views import (
    BatchViewSet,
    EventView,
    HealthView,
    HoldReleaseView,
    LimitDetailView,
    LimitListView,
    LockView,
    QueueCapView,
    QueueLimitView,
    QueuePauseView,
    QueueView,
    RateDetailView,
    RateListView,
    ScheduleViewSet,
    SchemaView,
    SignalTokenView,
    TaskViewSet,
    WorkerViewSet,
    not_found,
)

app_name = "scylla"

router = SimpleRouter()
router.register("tasks", TaskViewSet, basename="task")
router.register("workers", WorkerViewSet, basename="worker")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("batches", BatchViewSet, basename="batch")

# Bulk operations have a prefix of their own: under `tasks/`, every segment is a task's rn.
BULK: dict[str, Any] = {"filter_backends": [], "pagination_class": None}

urlpatterns: list[URLPattern | URLResolver] = [
    *router.urls,
    path("bulk/tasks/", TaskViewSet.as_view({"post": "bulk"}, **BULK), name="task-bulk"),
    path(
        "bulk/tasks/cancel/",
        TaskViewSet.as_view({"post": "cancel_many"}, **BULK),
        name="task-cancel-many",
    ),
    path("events/", EventView.as_view(), name="events"),
    path("queues/", QueueView.as_view(), name="queues"),
    path("queues/<str:name>/pause/", QueuePauseView.as_view(), name="queue-pause"),
    path("queues/<str:name>/limit/", QueueLimitView.as_view(), name="queue-limit"),
    path("queues/<str:name>/cap/", QueueCapView.as_view(), name="queue-cap"),
    path("locks/", LockView.as_view(), name="locks"),
    path("holds/<int:token>/release/", HoldReleaseView.as_view(), name="hold-release"),
    path("limits/", LimitListView.as_view(), name="limits"),
    path("limits/<path:name>/", LimitDetailView.as_view(), name="limit"),
    path("rates/", RateListView.as_view(), name="rates"),
    path("rates/<path:name>/", RateDetailView.as_view(), name="rate"),
    path("signals/<str:token>/", SignalTokenView.as_view(), name="signal-token"),
    path("health/", HealthView.as_view(), name="health"),
    path("schema/", SchemaView.as_view(), name="schema"),
    # Any other path, a line break in it too: a 404 in the API's own format.
    re_path(r"^(?P<path>(?s:.*))$", not_found),
]
