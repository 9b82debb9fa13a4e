"""Submitting tasks: one (`POST /tasks/`) or many in one statement (`POST /bulk/tasks/`)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import status
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ...models import Task
from ..exceptions import field_errors
from ..schema import document, errors
from ..serializers.submission import BulkOutcomeSerializer, SubmitSerializer
from ..serializers.tasks import TaskSerializer
from .base import ScyllaView, submitter_of, warn_if_unserved

MAX_BULK_ITEMS = 1000


class SubmissionRoutes(ScyllaView):
    """The routes by which a client submits tasks; the request's user (and API token) is
    recorded as their submitter."""

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
