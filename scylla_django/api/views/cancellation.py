"""Cancelling tasks, as a client: one (`POST /tasks/{rn}/cancel/`), or many in one
transaction (`POST /bulk/tasks/cancel/`); a user with `cancel_own_task` only cancels their own."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from ... import db
from ...models import Task
from .. import permissions
from ..filters import FILTER_BODY_SCHEMA, RN_SCHEMA, filter_from_body
from ..schema import detail_post, document, errors
from ..serializers.base import CancelSerializer
from ..serializers.cancellation import (
    MAX_CANCEL_RNS,
    BulkCancelSerializer,
    CancelledSerializer,
)
from ..serializers.tasks import TaskSerializer
from .base import ScyllaView, get_task


class CancellationRoutes(ScyllaView):
    """The routes by which a client cancels tasks."""

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
