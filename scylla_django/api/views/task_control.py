"""An operator's control of one task that has not started, under `tasks/{rn}/`: pause it (no
lease takes it until it is resumed), resume it, delete it (`DELETE`, kept as a record)."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from ..schema import detail_post, document, errors
from ..serializers.base import CancelSerializer
from ..serializers.task_control import TaskDeletionSerializer
from ..serializers.tasks import TaskDetailSerializer
from .base import ScyllaView, get_task


def user_name(request: Request) -> str | None:
    """Who asks, as the records name them (None for a user without a name)."""
    user: Any = request.user
    name = user.get_username() if hasattr(user, "get_username") else None
    return str(name) if name else None


class TaskControlRoutes(ScyllaView):
    """Pause, resume and delete one task; each is one fenced transaction."""

    @detail_post(
        operation_id="pause_task",
        summary="Pause a ready task",
        description=(
            "Keep a ready task from every lease until it is resumed (`resume/`), without "
            "cancelling it: it stays `ready`, and its `waiting` says `paused` (by whom, since "
            "when). 409 `task_paused` if it is paused already, `invalid_transition` for a task "
            "that is not ready or a follow-up waiting for its parents. Needs "
            "`scylla_django.control_queue`."
        ),
        request=CancelSerializer,
        responses={200: TaskDetailSerializer, **errors(400, 401, 403, 404, 409, 413)},
    )
    def pause(self, request: Request, rn: str) -> Response:
        self.parse(CancelSerializer)
        task = get_task(rn)
        task.pause(by=user_name(request))
        return Response(TaskDetailSerializer(get_task(rn, with_history=True)).data)

    @detail_post(
        operation_id="resume_task",
        summary="Resume a paused task",
        description=(
            "End the pause of a task: its own `not_before` is back, and workers lease it as "
            "before. 409 `not_paused` for a task that is not paused (a paused task cancelled "
            "meanwhile loses its pause and stays cancelled). Needs "
            "`scylla_django.control_queue`."
        ),
        request=CancelSerializer,
        responses={200: TaskDetailSerializer, **errors(400, 401, 403, 404, 409, 413)},
    )
    def resume(self, request: Request, rn: str) -> Response:
        self.parse(CancelSerializer)
        task = get_task(rn)
        task.resume()
        return Response(TaskDetailSerializer(get_task(rn, with_history=True)).data)

    @document(
        operation_id="delete_task",
        summary="Delete a task that has not started",
        description=(
            "Delete a ready task at once (its rn may be submitted again), keeping a record "
            "of it with its History and a closing `TaskDeletion` entry, returned here. 409 "
            "`task_started` for a running or finished task (cancel it instead), "
            "`invalid_transition` for a cancelled task or one of a batch or an order key. "
            "Needs `scylla_django.delete_task`."
        ),
        responses={200: TaskDeletionSerializer, **errors(401, 403, 404, 409)},
    )
    def destroy(self, request: Request, rn: str) -> Response:
        task = get_task(rn)
        record = task.delete_ready(by=user_name(request))
        return Response(TaskDeletionSerializer(record).data)
