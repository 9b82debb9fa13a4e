"""An operator's repairs of one task under `tasks/{rn}/`: retry it by hand, discard a dead
letter, reset a silent owner's lease, release a blocked order key."""

from __future__ import annotations

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ...exceptions import InvalidTransition
from ...models import Task, key_control
from ..schema import detail_post, errors
from ..serializers.base import CancelSerializer
from ..serializers.repairs import ResetLeaseSerializer
from ..serializers.tasks import TaskSerializer
from .base import ScyllaView, get_task


class RepairRoutes(ScyllaView):
    """The routes by which an operator repairs one task; each is one fenced transition."""

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
        operation_id="discard_task",
        summary="Discard a dead letter",
        description=(
            "Let a dead letter go: it stays aborted, is no longer dead, and is purged after "
            "`RETENTION`. To run it again instead, retry it (`POST /tasks/{rn}/retry/`). "
            "409 `invalid_transition` for a task that is not a dead letter."
        ),
        request=CancelSerializer,
        responses={200: TaskSerializer, **errors(400, 401, 403, 404, 409, 413)},
    )
    def discard(self, request: Request, rn: str) -> Response:
        self.parse(CancelSerializer)
        task = get_task(rn)
        if not Task.objects.filter(pk=task.pk).discard():
            raise InvalidTransition(
                f"Task {rn} is not a dead letter.", rn=rn, status=str(task.status)
            )
        task.refresh_from_db()
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

    @detail_post(
        operation_id="release_task_order_key",
        url_path="release-order",
        summary="Release the order key an aborted task holds",
        description=(
            "A task of an order key that aborted for good with `order_on_failure` `block` "
            "keeps the key's later tasks waiting until it is retried (`retry/`) or released "
            "here: one write, with a History `TaskOrderRelease`; the task stays aborted. 409 "
            "`invalid_transition` for a task that holds no order key. Needs "
            "`scylla_django.control_queue`."
        ),
        request=CancelSerializer,
        responses={200: TaskSerializer, **errors(400, 401, 403, 404, 409, 413)},
    )
    def release_order(self, request: Request, rn: str) -> Response:
        self.parse(CancelSerializer)
        task = get_task(rn)
        key_control.release_order(task)
        return Response(TaskSerializer(task).data)
