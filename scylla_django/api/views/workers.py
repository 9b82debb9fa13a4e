"""The worker routes: register, list, read, heartbeat, pause, resume and stop."""

from __future__ import annotations

from typing import Any

from rest_framework import status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from ...enums import Status
from ...models import Task, Worker
from .. import permissions
from ..filters import FilterBackend, WorkerFilter
from ..pagination import WorkerCursorPagination
from ..permissions import ActsAsOwnWorker, HasActionPermission
from ..schema import detail_post, document, errors
from ..serializers.base import CancelSerializer
from ..serializers.workers import (
    LeasedSerializer,
    LeaseSerializer,
    RegisterSerializer,
    WorkerDetailSerializer,
    WorkerSerializer,
    WorkerStateSerializer,
)
from .base import ScyllaView

MAX_HELD_TASKS = 1000


class WorkerViewSet(ScyllaView, viewsets.GenericViewSet[Worker]):
    """Workers: register one (the requesting user owns it), and lease tasks as it."""

    queryset = Worker.objects.all()
    serializer_class = WorkerSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    permission_classes = [HasActionPermission, ActsAsOwnWorker]
    required_permissions = {
        "create": permissions.WORK,
        "lease": permissions.WORK,
        "list": permissions.VIEW,
        "retrieve": permissions.VIEW,
        "stop": permissions.WORK,
    }
    filter_backends = [FilterBackend]
    filterset_class = WorkerFilter
    pagination_class = WorkerCursorPagination

    def allowed_query_params(self) -> frozenset[str]:
        return self.list_query_params(WorkerFilter, WorkerCursorPagination)

    @document(
        operation_id="register_worker",
        summary="Register a worker",
        description="The answer's `name` is what the worker operations take as `worker`.",
        request=RegisterSerializer,
        responses={201: WorkerSerializer, **errors(400, 401, 403, 413)},
    )
    def create(self, request: Request) -> Response:
        data = self.parse(RegisterSerializer)
        worker = Worker.objects.register(**data, user=request.user)
        return Response(WorkerSerializer(worker).data, status=status.HTTP_201_CREATED)

    @detail_post(
        operation_id="lease_tasks",
        summary="Lease tasks",
        description=(
            "ready → running for up to `limit` tasks of `queues` (the worker's own when "
            "omitted): highest priority first, then oldest. Possibly none."
        ),
        request=LeaseSerializer,
        responses={200: LeasedSerializer, **errors(400, 401, 403, 404, 413)},
    )
    def lease(self, request: Request, name: str) -> Response:
        data = self.parse(LeaseSerializer)
        worker = self.get_worker(name)
        tasks = Task.objects.lease(
            worker,
            data.get("queues", worker.queues),
            limit=data.get("limit", 1),
            lease_length=data.get("lease_length"),
        )
        worker.touch()
        return Response(LeasedSerializer({"tasks": tasks}).data)

    def get_queryset(self) -> Any:
        return Worker.objects.with_state()

    @document(
        operation_id="list_workers",
        summary="List workers",
        description=(
            "Newest first, with their liveness on the database clock: `alive`, `silent` "
            "(unseen for two heartbeat intervals), `dead` (unseen for its lease length) or "
            "`stopped`."
        ),
        responses={200: WorkerStateSerializer(many=True), **errors(400, 401, 403, 404)},
    )
    def list(self, request: Request) -> Response:
        workers = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(WorkerStateSerializer(workers, many=True).data)

    @document(
        operation_id="get_worker",
        summary="One worker, with the tasks it holds",
        responses={200: WorkerDetailSerializer, **errors(401, 403, 404)},
    )
    def retrieve(self, request: Request, name: str) -> Response:
        worker = self.get_queryset().get_by_name(name)
        worker.held_tasks = list(
            Task.objects.filter(status=Status.RUNNING, owner=worker.name).order_by("id")[
                :MAX_HELD_TASKS
            ]
        )
        return Response(WorkerDetailSerializer(worker).data)

    @detail_post(
        operation_id="stop_worker",
        summary="Record that a worker has stopped",
        description=(
            "For workers that talk HTTP: call it on the way out, after yielding your tasks, "
            "so that the worker shows as `stopped` rather than turning silent and dead. "
            "Idempotent: the first stop's time is kept."
        ),
        request=CancelSerializer,
        responses={200: WorkerStateSerializer, **errors(400, 401, 403, 404, 413)},
    )
    def stop(self, request: Request, name: str) -> Response:
        self.parse(CancelSerializer)
        worker = self.get_worker(name)
        worker.stop()
        return Response(WorkerStateSerializer(self.get_queryset().get(pk=worker.pk)).data)
