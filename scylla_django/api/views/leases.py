"""The task routes of an HTTP worker, each a transition of a task whose lease it holds:
heartbeat, complete, abort, yield and snooze. Each is fenced on the worker and the lease."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from ..schema import detail_post
from ..serializers.leases import (
    AbortedSerializer,
    AbortSerializer,
    CompleteSerializer,
    HeartbeatSerializer,
    SnoozeSerializer,
    WorkerActionSerializer,
)
from ..serializers.tasks import TaskSerializer
from .base import WORKER_ERRORS, ScyllaView


class LeaseRoutes(ScyllaView):
    """The routes under `tasks/{rn}/` that the worker holding the task's lease takes (the
    `scylla_django.work_task` permission, acting as its own worker)."""

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
        description=(
            "running → completed, with progress 1.0 and an optional `result`. `children` "
            "(submissions, as `POST /tasks/` takes them, without `after`) are submitted in the "
            "same transaction, fenced on the lease, each naming this task in `parent`; the "
            "answer lists their rns in `children`. A bad child is a 400 and nothing is written."
        ),
        request=CompleteSerializer,
        responses={200: TaskSerializer, **WORKER_ERRORS},
    )
    def complete(self, request: Request, rn: str) -> Response:
        worker, task, data = self.parse_held(CompleteSerializer, rn)
        if "children" in data:
            data["children"] = [dict(child) for child in data["children"]]
        spawned = task.complete(worker, **data)
        body = dict(TaskSerializer(task).data)
        if spawned:
            body["children"] = spawned
        return Response(body)

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
        operation_id="snooze_task",
        summary="Snooze a task",
        description=(
            "running → ready, leasable again `delay` from now (database clock), spending no "
            "attempt and not counted toward `MAX_LEASES`; History `TaskSnooze`. A task that "
            "snoozed `MAX_SNOOZES` times is aborted with `too_many_snoozes` instead "
            "(`status` says which). 409 `lease_lost` when the lease is not held."
        ),
        request=SnoozeSerializer,
        responses={200: TaskSerializer, **WORKER_ERRORS},
    )
    def snooze(self, request: Request, rn: str) -> Response:
        worker, task, data = self.parse_held(SnoozeSerializer, rn)
        task.snooze(worker, data["delay"], lease=data["lease"])
        return Response(TaskSerializer(task).data)
