"""The queue routes: counts per status, pause and resume, and the running limit."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext as _
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from ...enums import Status
from ...models import QueueSetting, Task
from ...models.serving import live_worker_queues
from ...validation import validate_queue
from .. import permissions
from ..schema import document, errors
from ..serializers.base import CancelSerializer
from ..serializers.queues import (
    QueueCapSerializer,
    QueueLimitSerializer,
    QueueSerializer,
    QueueSettingSerializer,
)
from .base import UNSERVED_QUEUE, ScyllaView


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
        raise NotFound(
            _("No queue can be called %(name)r.") % {"name": name}, code="queue_not_found"
        ) from None


def queue_setting(setting: QueueSetting) -> Response:
    return Response(
        QueueSettingSerializer(
            {
                "queue": setting.queue,
                "paused": setting.paused,
                "max_running": setting.max_running,
                "max_ready": setting.max_ready,
                "on_full": setting.on_full,
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


class QueueCapView(ScyllaView):
    """`PUT` sets or clears a queue's cap on ready tasks (admission control)."""

    http_method_names = ["put", "head"]
    required_permissions = {"put": permissions.CONTROL}

    @document(
        operation_id="cap_queue",
        summary="Cap a queue's ready tasks",
        description=(
            "At most `max_ready` tasks of the queue wait ready (`null`: no cap), checked by "
            "each submission: when the queue is full, `on_full` `reject` refuses it (429 "
            "`queue_full` with `Retry-After`) and `shed_oldest` cancels the oldest ready task "
            "(error code `shed`) to let it in. Tasks already ready above a new cap stay. "
            "Needs `scylla_django.control_queue` (docs/howto/admission.md)."
        ),
        request=QueueCapSerializer,
        responses={200: QueueSettingSerializer, **errors(400, 401, 403, 404)},
    )
    def put(self, request: Request, name: str) -> Response:
        queue = queue_named(name)
        data = self.parse(QueueCapSerializer)
        return queue_setting(QueueSetting.objects.cap(queue, data["max_ready"], data["on_full"]))
