"""The task routes: the view set under `tasks/`, which lists and reads tasks itself and takes
the routes of each other concept from the module named after it: `submission`, `cancellation`,
`forecast` and `logs` (a client's), `leases` (the worker's that holds a task's lease), `durable`
(durable execution), `repairs` and `task_control` (an operator's)."""

from __future__ import annotations

from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from ...models import Task
from ...models.forecast import WHAT_IF_NAMES
from .. import permissions
from ..filters import FilterBackend, TaskFilter
from ..pagination import TaskCursorPagination
from ..permissions import ActsAsOwnWorker, HasActionPermission
from ..schema import document, errors
from ..serializers.tasks import TaskDetailSerializer, TaskSerializer
from .base import ScyllaView, get_task
from .cancellation import CancellationRoutes
from .durable import DurableRoutes
from .forecast import ForecastRoutes
from .leases import LeaseRoutes
from .logs import LogRoutes
from .repairs import RepairRoutes
from .submission import SubmissionRoutes
from .task_control import TaskControlRoutes


class TaskViewSet(
    SubmissionRoutes,
    CancellationRoutes,
    ForecastRoutes,
    LogRoutes,
    LeaseRoutes,
    DurableRoutes,
    RepairRoutes,
    TaskControlRoutes,
    ScyllaView,
    viewsets.GenericViewSet[Task],
):
    # This docstring is the description of `GET /tasks/{rn}/` in the schema (drf-spectacular
    # takes the view's when an operation has none of its own).
    """Tasks: list, submit (one or in bulk), read and cancel them, as a client; heartbeat,
    complete, abort, yield and snooze them, as the worker that holds their lease
    (`LeaseRoutes`); record their steps, cursor and waits, or send them signals
    (`DurableRoutes`); retry, discard, reset or release them, as an operator (`RepairRoutes`);
    pause, resume and delete one that has not started (`TaskControlRoutes`).

    The bulk operations (`bulk`, `cancel_many`) are routed under `bulk/tasks/` by `urls.py`,
    so that no path under `tasks/` is anything but a task's rn.
    """

    queryset = Task.objects.all()
    serializer_class = TaskSerializer
    http_method_names = ["get", "post", "delete", "head"]  # DELETE: `destroy` alone
    lookup_field = "rn"
    lookup_value_regex = "[^/]+"
    filter_backends = [FilterBackend]
    filterset_class = TaskFilter
    pagination_class = TaskCursorPagination
    permission_classes = [HasActionPermission, ActsAsOwnWorker]
    required_permissions = {
        "list": permissions.VIEW,
        "retrieve": permissions.VIEW,
        "log": permissions.VIEW,
        "create": permissions.SUBMIT,
        "bulk": permissions.SUBMIT,
        "cancel": (permissions.CANCEL, permissions.CANCEL_OWN),
        "cancel_many": (permissions.CANCEL, permissions.CANCEL_OWN),
        "eta": permissions.VIEW,
        "eta_what_if": permissions.VIEW,
        "heartbeat": permissions.WORK,
        "complete": permissions.WORK,
        "abort": permissions.WORK,
        "yield_lease": permissions.WORK,
        "snooze": permissions.WORK,
        "steps": permissions.VIEW,
        "record_step": permissions.WORK,
        "checkpoint": permissions.WORK,
        "wait": permissions.WORK,
        "signal": permissions.SUBMIT,
        "retry": permissions.SUBMIT,
        "discard": permissions.CANCEL,
        "reset": permissions.CANCEL,
        "release_order": permissions.CONTROL,
        "pause": permissions.CONTROL,
        "resume": permissions.CONTROL,
        "destroy": permissions.DELETE,
    }

    def allowed_query_params(self) -> frozenset[str]:
        if self.action == "eta":
            # The what-if's names (`limit.<name>` is open-ended); WhatIf.parse checks them.
            return frozenset(
                name
                for name in self.request.query_params
                if name.startswith("limit.") or name in WHAT_IF_NAMES
            )
        return self.list_query_params(TaskFilter, TaskCursorPagination)

    @document(
        operation_id="list_tasks",
        summary="List tasks",
        description="Filtered, ordered, a cursor page at a time. History is left out.",
        responses={200: TaskSerializer(many=True), **errors(400, 401, 403, 404)},
    )
    def list(self, request: Request) -> Response:
        tasks = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(TaskSerializer(tasks, many=True).data)

    @document(
        operation_id="get_task",
        summary="One task, with its history",
        responses={200: TaskDetailSerializer, **errors(400, 401, 403, 404)},
    )
    def retrieve(self, request: Request, rn: str) -> Response:
        return Response(TaskDetailSerializer(get_task(rn, with_history=True)).data)
