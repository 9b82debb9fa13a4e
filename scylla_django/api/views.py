"""The views of the REST API (README, "REST API").

Each parses its input with a serializer and calls the model or manager
method that every other caller uses (`Task.objects.submit`, `task.cancel`, `task.heartbeat`, …);
none of them writes a task itself, and a task is never updated or deleted wholesale.

Status codes: 200, or 201 for a submission or a registration; errors as in `exceptions.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any, ClassVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django_filters.rest_framework import (  # type: ignore[import-untyped, unused-ignore]
    DjangoFilterBackend,
)
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from drf_spectacular.views import SpectacularAPIView
from rest_framework import status, viewsets
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.exceptions import ErrorDetail, NotFound, ValidationError
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import db
from ..enums import Status
from ..exceptions import TaskNotFound
from ..handlers import live_worker_queues, unserved_queues, unserved_warning
from ..health import run_checks
from ..models import QueueSetting, Task, Worker
from ..validation import validate_queue, validate_rn
from . import permissions
from .authentication import ScyllaTokenAuthentication, authenticators
from .exceptions import exception_handler, field_errors
from .filters import FILTER_BODY_SCHEMA, RN_SCHEMA, TaskFilter, WorkerFilter, filter_from_body
from .pagination import TaskCursorPagination, WorkerCursorPagination
from .parsers import ScyllaJSONParser
from .permissions import ActsAsOwnWorker, HasActionPermission
from .schema import SCHEMA_SETTINGS, detail_post, document, errors
from .serializers import (
    MAX_CANCEL_RNS,
    AbortedSerializer,
    AbortSerializer,
    BulkCancelSerializer,
    BulkOutcomeSerializer,
    CancelledSerializer,
    CancelSerializer,
    CompleteSerializer,
    HealthQuerySerializer,
    HealthSerializer,
    HeartbeatSerializer,
    LeasedSerializer,
    LeaseSerializer,
    QueueLimitSerializer,
    QueueSerializer,
    QueueSettingSerializer,
    RegisterSerializer,
    ResetLeaseSerializer,
    SubmitSerializer,
    TaskDetailSerializer,
    TaskSerializer,
    WorkerActionSerializer,
    WorkerDetailSerializer,
    WorkerSerializer,
    WorkerStateSerializer,
)

MAX_BULK_ITEMS = 1000
MAX_HELD_TASKS = 1000
UNSERVED_HEADER = "Scylla-Warning"
UNSERVED_QUEUE = "no live worker serves this queue"

logger = logging.getLogger("scylla_django")


def warn_if_unserved(response: Response, queues: Iterable[str]) -> Response:
    """Say so in a `Scylla-Warning` header (and the log) when nothing serves a queue submitted to.

    Nothing serves a queue when this process has no handler for it and no live worker leases
    from it (see `handlers.unserved_queues`, which reads the workers at most every few seconds).
    """
    warnings = [unserved_warning(queue) for queue in unserved_queues(queues)]
    for warning in warnings:
        logger.warning("task submitted: %s", warning)
    if warnings:
        response[UNSERVED_HEADER] = "; ".join(warnings)
    return response


class ScyllaAuthMixin:
    """Token (`Authorization: Token <key>`) or session authentication and the `{code, detail}`
    errors of `exceptions.py`, whatever the `REST_FRAMEWORK` setting says."""

    authentication_classes: Sequence[type[BaseAuthentication]] = [
        ScyllaTokenAuthentication,
        SessionAuthentication,
    ]

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get_authenticators(self) -> list[BaseAuthentication]:
        return authenticators(self.authentication_classes)


class ScyllaView(ScyllaAuthMixin, APIView):
    """What every view of the API shares, so that it needs no `REST_FRAMEWORK` setting.

    Token or session authentication, JSON in and out, the `{code, detail}` errors of
    `exceptions.py`, and no OPTIONS introspection.
    """

    permission_classes = [HasActionPermission]
    parser_classes = [ScyllaJSONParser]
    renderer_classes = [JSONRenderer]
    metadata_class = None
    http_method_names = ["get", "post", "head"]
    schema = AutoSchema()
    required_permissions: ClassVar[dict[str, str]] = {}

    def allowed_query_params(self) -> frozenset[str]:
        """The query parameters this request may carry; any other is refused (400)."""
        return frozenset()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """Authenticate and check permissions, then refuse unknown query parameters: a
        misspelt filter (`?stauts=ready`) would otherwise be ignored and select everything.
        """
        super().initial(request, *args, **kwargs)
        method = (request.method or "").lower()
        if method not in self.http_method_names or not hasattr(self, method):
            return  # a 405 follows
        allowed = self.allowed_query_params()
        unknown = sorted(set(request.query_params) - allowed)
        if unknown:
            hint = (
                f"Allowed: {', '.join(sorted(allowed))}."
                if allowed
                else "This operation takes no query parameters."
            )
            raise ValidationError(
                {
                    name: [
                        ErrorDetail(f"Unknown query parameter. {hint}", code="unknown_parameter")
                    ]
                    for name in unknown
                }
            )

    def parse(self, serializer_class: type[Any]) -> dict[str, Any]:
        """The request body, validated by `serializer_class`; else a 400."""
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def get_worker(self, name: str) -> Worker:
        """The worker called `name` (404 `worker_not_found`), if the user may act as it (403)."""
        worker = Worker.objects.get_by_name(name)
        self.check_object_permissions(self.request, worker)
        return worker

    def parse_held(
        self, serializer_class: type[Any], rn: str
    ) -> tuple[Worker, Task, dict[str, Any]]:
        """For a worker operation: the body's worker, the task `rn`, and the rest of the body,
        whose `lease` (the lease number the worker holds) the write is fenced on."""
        data = self.parse(serializer_class)
        worker = self.get_worker(data.pop("worker"))
        return worker, get_task(rn), data

    def list_query_params(self, filterset: Any, paging: Any) -> frozenset[str]:
        """On `list`: the filters of `filterset` and the parameters of `paging`; else none."""
        if self.action != "list":  # type: ignore[attr-defined]
            return frozenset()
        names = (
            paging.cursor_query_param,
            paging.page_size_query_param,
            getattr(paging, "ordering_query_param", None),
        )
        return frozenset(filterset.base_filters) | {name for name in names if name}


def get_task(rn: str, *, with_history: bool = False) -> Task:
    """The task with this rn, or TaskNotFound (also for a string that cannot be an rn)."""
    try:
        validate_rn(rn)  # else the database would be asked about, e.g., a NUL character
    except DjangoValidationError:
        raise TaskNotFound(f"No task has rn {rn!r}.", rn=rn) from None
    tasks = Task.objects.prefetch_related("history") if with_history else Task.objects.all()
    return tasks.get_by_rn(rn)


WORKER_ERRORS = errors(400, 401, 403, 404, 409, 413)


class TaskViewSet(ScyllaView, viewsets.GenericViewSet[Task]):
    """Tasks: list, submit (one or in bulk), read and cancel them, as a client; heartbeat,
    complete, abort and yield them, as the worker that holds their lease.

    The bulk operations (`bulk`, `cancel_many`) are routed under `bulk/tasks/` by `urls.py`,
    so that no path under `tasks/` is anything but a task's rn.
    """

    queryset = Task.objects.all()
    serializer_class = TaskSerializer
    lookup_field = "rn"
    lookup_value_regex = "[^/]+"
    filter_backends = [DjangoFilterBackend]
    filterset_class = TaskFilter
    pagination_class = TaskCursorPagination
    permission_classes = [HasActionPermission, ActsAsOwnWorker]
    required_permissions = {
        "list": permissions.VIEW,
        "retrieve": permissions.VIEW,
        "create": permissions.SUBMIT,
        "bulk": permissions.SUBMIT,
        "cancel": permissions.CANCEL,
        "cancel_many": permissions.CANCEL,
        "heartbeat": permissions.WORK,
        "complete": permissions.WORK,
        "abort": permissions.WORK,
        "yield_lease": permissions.WORK,
        "retry": permissions.SUBMIT,
        "reset": permissions.CANCEL,
    }

    def allowed_query_params(self) -> frozenset[str]:
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

    @document(
        operation_id="submit_task",
        summary="Submit a task",
        request=SubmitSerializer,
        description=(
            "201 with the new task. With a `unique_key` that a task holds: 200 with that task "
            "(`on_conflict` `return`, the default, or `replace`, after replacing a still-ready "
            "one's spec, priority and not_before), or 409 `duplicate` naming its `rn` and "
            "the `key` (`raise`)."
        ),
        responses={
            201: TaskSerializer,
            200: TaskSerializer,
            **errors(400, 401, 403, 404, 409, 413),
        },
    )
    def create(self, request: Request) -> Response:
        task = Task.objects.submit(**self.parse(SubmitSerializer))
        created = task.submit_outcome == "inserted"
        response = Response(
            TaskSerializer(task).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
        return warn_if_unserved(response, [task.queue])

    @document(
        operation_id="submit_tasks",
        summary="Submit many tasks",
        description=(
            f"1 to {MAX_BULK_ITEMS} tasks in one statement. The answer is 200 with one outcome "
            "per item, in order: `inserted`, `duplicate` (the rn exists, or came earlier in "
            "the request, or a task holds the item's `unique_key`: `rn` names that task), "
            "`replaced` (`on_conflict: replace`) or `invalid` (with `errors`). Valid items are "
            "inserted whatever happens to the others. 409 `not_supported`: an item names a "
            "unique key and the database cannot keep one (MySQL)."
        ),
        request={
            "application/json": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/Submit"},  # SubmitSerializer
                "minItems": 1,
                "maxItems": MAX_BULK_ITEMS,
            }
        },
        responses={200: BulkOutcomeSerializer(many=True), **errors(400, 401, 403, 409, 413)},
    )
    def bulk(self, request: Request) -> Response:
        items = request.data
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_BULK_ITEMS:
            raise ValidationError(
                ErrorDetail(f"Send a list of 1 to {MAX_BULK_ITEMS} tasks.", code="invalid_bulk")
            )
        outcomes: dict[int, dict[str, Any]] = {}
        valid: list[tuple[int, dict[str, Any]]] = []
        for index, item in enumerate(items):
            serializer = SubmitSerializer(data=item)
            if serializer.is_valid():
                valid.append((index, dict(serializer.validated_data)))
            else:
                rn = item.get("rn") if isinstance(item, dict) else None
                outcomes[index] = {
                    "index": index,
                    "rn": rn if isinstance(rn, str) else None,
                    "outcome": "invalid",
                    "errors": field_errors(serializer.errors),
                }
        submitted = Task.objects.submit_many(data for _, data in valid)
        for (index, _), outcome in zip(valid, submitted, strict=True):
            outcomes[index] = {
                "index": index,
                "rn": outcome.rn,
                "outcome": outcome.outcome,
                "errors": {
                    name: [{"code": "invalid", "detail": message} for message in messages]
                    for name, messages in outcome.errors.items()
                },
            }
        response = Response(
            BulkOutcomeSerializer([outcomes[i] for i in sorted(outcomes)], many=True).data
        )
        return warn_if_unserved(response, (data["queue"] for _, data in valid))

    @document(
        operation_id="cancel_tasks",
        summary="Cancel many tasks",
        description=(
            "Cancels, in one transaction, the tasks that `filter` (the filters of "
            "`GET /tasks/`, at least one) or `rns` (up to "
            f"{MAX_CANCEL_RNS}) select: the ready or running ones become cancelled, the "
            "others are skipped. The answer counts them; `not_found` counts rns that name no task."
        ),
        request={
            "application/json": {
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {"filter": FILTER_BODY_SCHEMA},
                        "required": ["filter"],
                        "additionalProperties": False,
                    },
                    {
                        "type": "object",
                        "properties": {
                            "rns": {
                                "type": "array",
                                "items": RN_SCHEMA,
                                "minItems": 1,
                                "maxItems": MAX_CANCEL_RNS,
                            }
                        },
                        "required": ["rns"],
                        "additionalProperties": False,
                    },
                ]
            }
        },
        responses={200: CancelledSerializer, **errors(400, 401, 403, 413)},
    )
    def cancel_many(self, request: Request) -> Response:
        data = self.parse(BulkCancelSerializer)
        if "rns" in data:
            rns = set(data["rns"])
            selected = Task.objects.filter(rn__in=rns)
        else:
            selected = filter_from_body(data["filter"], Task.objects.all())
        with db.write_atomic(selected.db):
            found = selected.count()
            cancelled = selected.cancel()
        counts = {
            "cancelled": cancelled,
            "skipped": max(found - cancelled, 0),
            "not_found": len(rns) - found if "rns" in data else 0,
        }
        return Response(CancelledSerializer(counts).data)

    @detail_post(
        operation_id="cancel_task",
        summary="Cancel a task",
        description="ready or running → cancelled. A terminal task is a 409.",
        request=CancelSerializer,
        responses={200: TaskSerializer, **errors(400, 401, 403, 404, 409, 413)},
    )
    def cancel(self, request: Request, rn: str) -> Response:
        self.parse(CancelSerializer)
        task = get_task(rn)
        task.cancel()
        return Response(TaskSerializer(task).data)

    @detail_post(
        operation_id="heartbeat_task",
        summary="Heartbeat: extend the lease",
        description=(
            "`deadline = now + lease_length`, and `progress` if given. A 409 `task_cancelled` or "
            "`lease_lost` means: stop working on the task."
        ),
        request=HeartbeatSerializer,
        responses={200: TaskSerializer, **WORKER_ERRORS},
    )
    def heartbeat(self, request: Request, rn: str) -> Response:
        worker, task, data = self.parse_held(HeartbeatSerializer, rn)
        task.heartbeat(worker, **data)
        worker.touch()
        return Response(TaskSerializer(task).data)

    @detail_post(
        operation_id="complete_task",
        summary="Complete a task",
        description="running → completed, with progress 1.0 and an optional `result`.",
        request=CompleteSerializer,
        responses={200: TaskSerializer, **WORKER_ERRORS},
    )
    def complete(self, request: Request, rn: str) -> Response:
        worker, task, data = self.parse_held(CompleteSerializer, rn)
        task.complete(worker, **data)
        return Response(TaskSerializer(task).data)

    @detail_post(
        operation_id="abort_task",
        summary="Abort a task",
        description=(
            "running → aborted, recording `errors`. If the task's retry policy covers the "
            "errors (or `retry` is true), a retry is submitted with the abort: `successor`."
        ),
        request=AbortSerializer,
        responses={200: AbortedSerializer, **WORKER_ERRORS},
    )
    def abort(self, request: Request, rn: str) -> Response:
        worker, task, data = self.parse_held(AbortSerializer, rn)
        errors = [dict(error) for error in data["errors"]]
        successor = task.abort(worker, errors, retry=data.get("retry"), lease=data["lease"])
        body = dict(TaskSerializer(task).data)
        body["successor"] = successor.rn if successor is not None else None
        return Response(body)

    @detail_post(
        operation_id="retry_task",
        summary="Retry a task by hand",
        description=(
            "Submit an aborted or cancelled task again, as the next attempt of its chain (201). "
            "409 `invalid_transition` for another status, `duplicate_task` if it was retried."
        ),
        request=CancelSerializer,
        responses={201: TaskSerializer, **errors(400, 401, 403, 404, 409, 413)},
    )
    def retry(self, request: Request, rn: str) -> Response:
        self.parse(CancelSerializer)
        successor = get_task(rn).retry()
        return Response(TaskSerializer(successor).data, status=status.HTTP_201_CREATED)

    @detail_post(
        operation_id="yield_task",
        url_path="yield",
        summary="Yield a task",
        description=(
            "Give the lease back (`deadline = now - 1 s`, History `TaskYield`): the monitor's "
            "next pass makes the task ready again, without counting a timeout."
        ),
        request=WorkerActionSerializer,
        responses={200: TaskSerializer, **WORKER_ERRORS},
    )
    def yield_lease(self, request: Request, rn: str) -> Response:
        worker, task, data = self.parse_held(WorkerActionSerializer, rn)
        task.yield_lease(worker, lease=data["lease"])
        return Response(TaskSerializer(task).data)

    @detail_post(
        operation_id="reset_task_lease",
        summary="Reset a lease now",
        description=(
            "running → ready at once, for a task whose owner is silent, dead or stopped, "
            "without waiting for its deadline: owner cleared, progress 0, History "
            "`TaskTimeout`. Only if the task is still held by `owner` under lease `lease` "
            "(what the operator saw), else 409 `lease_lost`; 409 `owner_alive` while the "
            "owner still heartbeats. Needs the permission to cancel tasks."
        ),
        request=ResetLeaseSerializer,
        responses={200: TaskSerializer, **errors(400, 401, 403, 404, 409, 413)},
    )
    def reset(self, request: Request, rn: str) -> Response:
        data = self.parse(ResetLeaseSerializer)
        task = get_task(rn)
        task.reset_lease(data["owner"], data["lease"])
        return Response(TaskSerializer(task).data)


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
    filter_backends = [DjangoFilterBackend]
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


class QueueView(ScyllaView):
    """Per queue: how many tasks are in each status, and the age of the oldest ready task."""

    required_permissions = {"get": permissions.VIEW}

    @document(
        operation_id="list_queues",
        summary="Queue counts",
        description=(
            "Two aggregate queries, as the admin dashboard's. `ready` counts leasable tasks "
            "only; ready tasks whose `not_before` is ahead are counted as `scheduled`. "
            "`oldest_ready` is when the longest-waiting leasable task became leasable (its "
            "`created`, or its `not_before` if later); `oldest_ready_age` is the seconds since, "
            'on the database clock. `warnings` has "no live worker serves this queue" for a '
            "queue with leasable tasks that no alive or silent worker leases from."
        ),
        responses={200: QueueSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        summaries = Task.objects.queue_summaries()
        queues = [
            {
                "queue": summary.queue,
                "counts": summary.counts,
                "oldest_ready": summary.waiting_since,
                "oldest_ready_age": (
                    None if summary.waited is None else max(summary.waited.total_seconds(), 0.0)
                ),
            }
            for summary in summaries
        ]
        data = QueueSerializer(queues, many=True).data
        waiting = {s.queue for s in summaries if s.counts.get(Status.READY.value)}
        live = live_worker_queues(max_age=0) if waiting else frozenset()
        for item, summary in zip(data, summaries, strict=True):
            served = summary.queue not in waiting or summary.queue in live
            item["warnings"] = [] if served else [UNSERVED_QUEUE]
        return Response(data)


def queue_named(name: str) -> str:
    """`name` from the path if it can be a queue's name, else 404 `queue_not_found`."""
    try:
        return validate_queue(name)
    except DjangoValidationError:
        raise NotFound(f"No queue can be called {name!r}.", code="queue_not_found") from None


def queue_setting(setting: QueueSetting) -> Response:
    return Response(
        QueueSettingSerializer(
            {
                "queue": setting.queue,
                "paused": setting.paused,
                "max_running": setting.max_running,
                "updated": setting.updated if setting.pk else None,
            }
        ).data
    )


class QueuePauseView(ScyllaView):
    """`PUT` pauses a queue, `DELETE` resumes it; `GET` tells whether it is paused."""

    http_method_names = ["get", "put", "delete", "head"]
    required_permissions = {
        "get": permissions.VIEW,
        "put": permissions.CONTROL,
        "delete": permissions.CONTROL,
    }

    @document(
        operation_id="get_queue_settings",
        summary="A queue's settings",
        description="Whether the queue is paused, and its limit on running tasks.",
        responses={200: QueueSettingSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return queue_setting(QueueSetting.objects.of(queue_named(name)))

    @document(
        operation_id="pause_queue",
        summary="Pause a queue",
        description=(
            "No task of the queue is leased from the next lease on (the lease statement reads "
            "the setting); tasks can still be submitted, and running ones carry on. "
            "Idempotent. Needs `scylla_django.control_queue`."
        ),
        request=CancelSerializer,
        responses={200: QueueSettingSerializer, **errors(400, 401, 403, 404)},
    )
    def put(self, request: Request, name: str) -> Response:
        self.parse(CancelSerializer)
        return queue_setting(QueueSetting.objects.pause(queue_named(name)))

    @document(
        operation_id="resume_queue",
        summary="Resume a queue",
        description=(
            "Lease the queue's tasks again, and wake the listening workers. Idempotent. "
            "Needs `scylla_django.control_queue`."
        ),
        responses={200: QueueSettingSerializer, **errors(400, 401, 403, 404)},
    )
    def delete(self, request: Request, name: str) -> Response:
        return queue_setting(QueueSetting.objects.resume(queue_named(name)))


class QueueLimitView(ScyllaView):
    """`PUT` sets or clears a queue's limit on running tasks across all workers."""

    http_method_names = ["put", "head"]
    required_permissions = {"put": permissions.CONTROL}

    @document(
        operation_id="limit_queue",
        summary="Limit a queue's running tasks",
        description=(
            "At most `max_running` tasks of the queue run at once across all workers "
            "(`null`: no limit), enforced by the lease. Needs `scylla_django.control_queue`."
        ),
        request=QueueLimitSerializer,
        responses={200: QueueSettingSerializer, **errors(400, 401, 403, 404)},
    )
    def put(self, request: Request, name: str) -> Response:
        queue = queue_named(name)
        data = self.parse(QueueLimitSerializer)
        return queue_setting(QueueSetting.objects.limit(queue, data["max_running"]))


class HealthView(ScyllaView):
    """Health checks for probes, as `manage.py scylla_health` runs them: 200 or 503."""

    authentication_classes = []
    permission_classes = [AllowAny]

    def allowed_query_params(self) -> frozenset[str]:
        return frozenset(HealthQuerySerializer().fields)

    @document(
        operation_id="check_health",
        summary="Health checks",
        description=(
            "No authentication, for load balancers and Kubernetes probes. The database is "
            "always checked; `hostname`, `monitor` and `max_lag` add checks. 200 when every "
            "check passes, else 503; the body lists each check either way."
        ),
        parameters=[HealthQuerySerializer],
        responses={
            200: HealthSerializer,
            503: OpenApiResponse(HealthSerializer, description="A check failed."),
            **errors(400),
        },
    )
    def get(self, request: Request) -> Response:
        query = HealthQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        options = query.validated_data
        max_lag = options.get("max_lag")
        checks = run_checks(
            worker_host=options.get("hostname"),
            monitor=options["monitor"],
            max_lag=timedelta(seconds=max_lag) if max_lag is not None else None,
            queues=options.get("queue", []),
        )
        healthy = all(check.ok for check in checks)
        body = {"status": "ok" if healthy else "failing", "checks": checks}
        return Response(
            HealthSerializer(body).data,
            status=status.HTTP_200_OK if healthy else status.HTTP_503_SERVICE_UNAVAILABLE,
        )


class SchemaView(ScyllaAuthMixin, SpectacularAPIView):
    """The OpenAPI 3 schema of this API (YAML, or JSON with `?format=json`)."""

    permission_classes = [IsAuthenticated]
    custom_settings = SCHEMA_SETTINGS
    schema = AutoSchema()

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """Errors are JSON, like the rest of the API's, whatever format was asked for."""
        if response.status_code >= 400:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)

    @document(
        operation_id="get_schema",
        summary="The OpenAPI 3 schema",
        responses={200: OpenApiTypes.OBJECT, **errors(401, 404)},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if request.query_params.get("format") == "":
            raise NotFound("Choose a format: json or yaml.")
        response: Response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]
        return response


@csrf_exempt  # a POST to no route is a 404 too, not Django's CSRF page: nothing is written
def not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any other path under the API, whatever the method: a 404 in the API's error format."""
    detail = f"No API route matches {request.path!r}."
    if not request.path.endswith("/"):
        detail += " Routes end with a slash."
    return JsonResponse({"code": "not_found", "detail": detail}, status=404)
