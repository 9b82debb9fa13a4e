"""The task routes: submit, list, read and cancel; the lease routes of an HTTP worker and an
operator's repairs are mixed in from `leases` and `repairs`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import HttpResponse
from django.utils.translation import gettext as _
from django_filters.rest_framework import (  # type: ignore[import-untyped, unused-ignore]
    DjangoFilterBackend,
)
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ErrorDetail, NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ... import db, logs
from ...models import Task
from ...models.forecast import WHAT_IF_NAMES, WhatIf
from .. import permissions
from ..exceptions import field_errors
from ..filters import FILTER_BODY_SCHEMA, RN_SCHEMA, TaskFilter, filter_from_body
from ..pagination import TaskCursorPagination
from ..permissions import ActsAsOwnWorker, HasActionPermission
from ..schema import detail_post, document, errors
from ..serializers.base import CancelSerializer
from ..serializers.cancellation import MAX_CANCEL_RNS, BulkCancelSerializer, CancelledSerializer
from ..serializers.forecast import ForecastSerializer
from ..serializers.submission import BulkOutcomeSerializer, SubmitSerializer
from ..serializers.tasks import TaskDetailSerializer, TaskSerializer
from .base import ScyllaView, get_task, submitter_of, warn_if_unserved
from .durable import DurableRoutes
from .leases import LeaseRoutes
from .repairs import RepairRoutes
from .task_control import TaskControlRoutes

MAX_BULK_ITEMS = 1000
_SIZE = {"type": "integer", "minimum": 1, "maximum": 1_000_000}
#: The body of `POST /tasks/{rn}/eta/`.
WHAT_IF_SCHEMA = {
    "type": "object",
    "properties": {
        "limits": {
            "type": "object",
            "additionalProperties": _SIZE,
            "description": "What if these limits had these sizes, by name.",
        },
        "max_running": _SIZE,
        "workers": _SIZE,
        "run_time": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1e9},
    },
    "additionalProperties": False,
}


class TaskViewSet(
    LeaseRoutes,
    DurableRoutes,
    RepairRoutes,
    TaskControlRoutes,
    ScyllaView,
    viewsets.GenericViewSet[Task],
):
    """Tasks: list, submit (one or in bulk), read and cancel them, as a client; heartbeat,
    complete, abort, yield and snooze them, as the worker that holds their lease
    (`LeaseRoutes`); record their steps, cursor and waits, or send them signals
    (`DurableRoutes`); retry, discard, reset or release them, as an operator (`RepairRoutes`);
    hold, release and delete one that has not started (`TaskControlRoutes`).

    The bulk operations (`bulk`, `cancel_many`) are routed under `bulk/tasks/` by `urls.py`,
    so that no path under `tasks/` is anything but a task's rn.
    """

    queryset = Task.objects.all()
    serializer_class = TaskSerializer
    http_method_names = ["get", "post", "delete", "head"]  # DELETE: `destroy` alone
    lookup_field = "rn"
    lookup_value_regex = "[^/]+"
    filter_backends = [DjangoFilterBackend]
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
        "hold": permissions.CONTROL,
        "release": permissions.CONTROL,
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

    @document(
        operation_id="get_task_log",
        summary="A task's log",
        description=(
            "What the task's handler logged in its last run (`ctx.logger` and the `logging` "
            "records of its thread), as plain text, capped at `TASK_LOG_MAX_BYTES`. 404 "
            "`no_log` when no run of it logged anything (or the log was deleted), or no log "
            "is kept (no `TASK_LOG_STORAGE` is named; the detail says so)."
        ),
        responses={
            (200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="The log."),
            **errors(400, 401, 403, 404),
        },
    )
    @action(detail=True, methods=["get"])
    def log(self, request: Request, rn: str) -> HttpResponse:
        text = get_task(rn).read_log()
        if text is None:
            why = logs.not_kept()
            detail = (
                _("Task %(rn)s has no log: %(why)s.") % {"rn": rn, "why": why}
                if why
                else _("Task %(rn)s has no log.") % {"rn": rn}
            )
            raise NotFound(detail, code="no_log")
        return HttpResponse(text, content_type="text/plain; charset=utf-8")

    @document(
        operation_id="submit_task",
        summary="Submit a task",
        request=SubmitSerializer,
        description=(
            "201 with the new task. With a `unique_key` that a task holds: 200 with that task "
            "(`on_conflict` `return`, the default, or `replace`, after replacing a still-ready "
            "one's spec, priority and not_before), or 409 `duplicate` naming its `rn` and "
            "the `key` (`raise`). `locks`, `limits`, `order_key` and `rate_key` are taken by "
            "the lease (docs/howto/keys.md); a bad or unknown one is a 400 "
            "(`invalid_key`, `unknown_limit`, `unknown_rate`) and nothing is written. 409 "
            "`not_supported`: the database cannot keep keys (MySQL/MariaDB). 429 "
            "`queue_full` with `Retry-After`: the queue (or the `admission_key`) holds its "
            "`max_ready` ready tasks and `on_full` is `reject`; nothing is written. The "
            "request's user (and API token) is recorded as the task's submitter."
        ),
        responses={
            201: TaskSerializer,
            200: TaskSerializer,
            **errors(400, 401, 403, 404, 409, 413, 429),
        },
    )
    def create(self, request: Request) -> Response:
        data = self.parse(SubmitSerializer)
        submitter = submitter_of(
            request, data.pop("submitter_name", ""), data.pop("submitter_description", "")
        )
        task = Task.objects.submit(**data, submitter=submitter)
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
            "inserted whatever happens to the others; an invalid item writes nothing. 409 "
            "`not_supported`: an item names a unique key, lock, limit, order key or rate and "
            "the database cannot keep one (MySQL/MariaDB); nothing is written."
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
                ErrorDetail(
                    _("Send a list of 1 to %(max)d tasks.") % {"max": MAX_BULK_ITEMS},
                    code="invalid_bulk",
                )
            )
        outcomes: dict[int, dict[str, Any]] = {}
        valid: list[tuple[int, dict[str, Any]]] = []
        for index, item in enumerate(items):
            serializer = SubmitSerializer(data=item)
            if serializer.is_valid():
                data = dict(serializer.validated_data)
                data.pop("submitter_name", None)  # a bulk submission has one submitter
                data.pop("submitter_description", None)
                valid.append((index, data))
            else:
                rn = item.get("rn") if isinstance(item, dict) else None
                outcomes[index] = {
                    "index": index,
                    "rn": rn if isinstance(rn, str) else None,
                    "outcome": "invalid",
                    "errors": field_errors(serializer.errors),
                }
        submitted = Task.objects.submit_many(
            (data for _index, data in valid), submitter=submitter_of(request)
        )
        for (index, _data), outcome in zip(valid, submitted, strict=True):
            outcomes[index] = {
                "index": index,
                "rn": outcome.rn,
                "outcome": outcome.outcome,
                "errors": {
                    name: [
                        {"code": code, "detail": message}
                        for code, message in zip(outcome.codes[name], messages, strict=True)
                    ]
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
        if not permissions.has_perm(request.user, permissions.CANCEL):
            # `cancel_own_task` only: the others' tasks are out of reach (and not counted).
            selected = selected.filter(origin__user=request.user.pk)
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
        if not permissions.may_cancel(request.user, task.submitted_by()):
            raise PermissionDenied(
                _("You may cancel only the tasks you submitted."), code="not_your_task"
            )
        task.cancel()
        return Response(TaskSerializer(task).data)

    @document(
        operation_id="forecast_task",
        summary="When will a ready task start",
        description=(
            "A forecast of the task's start from the rules in force: its place in its "
            "queue, the live workers' slots, its limits, locks, order key and rate, and the "
            "run times measured on its queue; `bottleneck` is the rule that decides it "
            '("limit stripe 3/3, 12 ahead: about 4 min"). A what-if changes rules for the '
            "forecast only: `limit.<name>` (a limit's size), `max_running` (the queue's), "
            "`workers` (the worker slots serving the queue), `run_time` (seconds), as query "
            "parameters here or as the body of a POST. `starts_at` is null when unknown (a "
            "paused queue, no live worker, parents, no run time measured yet): `detail` says "
            "why. Nothing is written (docs/howto/eta.md)."
        ),
        parameters=[
            OpenApiParameter(
                "max_running",
                {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                description="What if the queue's max_running were this.",
            ),
            OpenApiParameter(
                "workers",
                {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                description="What if this many worker slots served the queue.",
            ),
            OpenApiParameter(
                "run_time",
                {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1e9},
                description="What if each task ran this many seconds.",
            ),
        ],
        responses={200: ForecastSerializer, **errors(400, 401, 403, 404)},
    )
    @action(detail=True, methods=["get"])
    def eta(self, request: Request, rn: str) -> Response:
        return self.forecast(rn, request.query_params)

    @document(
        operation_id="forecast_task_what_if",
        summary="When would a ready task start, if",
        description=(
            "`GET /tasks/{rn}/eta/` with the what-if as a JSON object: "
            '`{"limits": {"stripe": 6}, "workers": 8}`. Nothing is written.'
        ),
        request={"application/json": WHAT_IF_SCHEMA},
        responses={200: ForecastSerializer, **errors(400, 401, 403, 404, 413)},
    )
    @eta.mapping.post
    def eta_what_if(self, request: Request, rn: str) -> Response:
        body = request.data
        if isinstance(body, Mapping) and isinstance(body.get("limits", {}), Mapping):
            limits = body.get("limits", {})
            body = {
                **{k: v for k, v in body.items() if k != "limits"},
                **{f"limit.{name}": size for name, size in limits.items()},
            }
        return self.forecast(rn, body)

    def forecast(self, rn: str, given: Any) -> Response:
        """The forecast of task `rn` under the what-if `given` (a mapping)."""
        if not isinstance(given, Mapping):
            raise ValidationError(
                ErrorDetail(_("Send a JSON object of what-ifs."), code="invalid_what_if")
            )
        what_if = WhatIf.parse({name: given[name] for name in given})
        return Response(ForecastSerializer(get_task(rn).forecast(what_if).as_json()).data)
