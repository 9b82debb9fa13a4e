"""The batch routes: submit a batch with its callbacks, read its progress and its results in
pages, cancel it whole."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ErrorDetail, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ...batches import Batch, cancel_batch
from ...models import Batch as BatchRow
from .. import permissions
from ..pagination import strict_page_size
from ..schema import detail_post, document, errors
from ..serializers.base import CancelSerializer
from ..serializers.batches import (
    BatchResultsSerializer,
    BatchSerializer,
    BatchSubmitSerializer,
    BatchSubmittedSerializer,
)
from ..serializers.submission import BulkOutcomeSerializer
from .base import ScyllaView, warn_if_unserved

MAX_RESULTS_PAGE = 1000


def get_batch(pk: str) -> BatchRow:
    """The batch `pk`, or a 404 `batch_not_found`."""
    batch = (
        BatchRow.objects.select_related("on_success", "on_complete", "on_failure")
        .filter(pk=int(pk))
        .first()
        if pk.isdigit() and len(pk) < 19
        else None
    )
    if batch is None:
        raise NotFound(f"No batch has id {pk!r}.", code="batch_not_found")
    return batch


class BatchViewSet(ScyllaView, viewsets.GenericViewSet[BatchRow]):
    """Batches: submit one with its callbacks, read its progress and results, cancel it."""

    queryset = BatchRow.objects.all()
    lookup_value_regex = "[0-9]+"
    required_permissions = {
        "create": permissions.SUBMIT,
        "retrieve": permissions.VIEW,
        "results": permissions.VIEW,
        "cancel": permissions.CANCEL,
    }

    def allowed_query_params(self) -> frozenset[str]:
        return frozenset({"after", "page_size"}) if self.action == "results" else frozenset()

    @document(
        operation_id="submit_batch",
        summary="Submit a batch",
        request=BatchSubmitSerializer,
        description=(
            "The tasks and callbacks in one transaction (201, with one outcome per task as "
            "`POST /bulk/tasks/` gives them: a duplicate rn is not in the batch). An invalid "
            "task is a 400 naming it (`tasks.<index>.<field>`), and nothing is written. A callback "
            "on a queue that no handler and no live worker serves is a 400 `unknown_queue`; "
            "any invalid task or callback is a 400 and nothing is written."
        ),
        responses={201: BatchSubmittedSerializer, **errors(400, 401, 403, 409, 413)},
    )
    def create(self, request: Request) -> Response:
        data = self.parse(BatchSubmitSerializer)
        callbacks = {
            kind: None if data.get(kind) is None else dict(data[kind])
            for kind in ("on_success", "on_complete", "on_failure")
        }
        with Batch(
            on_success=callbacks["on_success"],
            on_complete=callbacks["on_complete"],
            on_failure=callbacks["on_failure"],
        ) as batch:
            outcomes = batch.submit_many(dict(task) for task in data["tasks"])
            invalid = {
                f"tasks.{outcome.index}.{name}": [
                    ErrorDetail(message, code="invalid") for message in messages
                ]
                for outcome in outcomes
                if outcome.outcome == "invalid"
                for name, messages in outcome.errors.items()
            }
            if invalid:  # leaving the block by an exception writes nothing
                raise ValidationError(invalid)
        if batch.row is None:
            raise RuntimeError("a batch that submitted its tasks has its row")
        row = get_batch(str(batch.row.pk))
        outcome_rows = [
            {
                "index": outcome.index,
                "rn": outcome.rn,
                "outcome": outcome.outcome,
                "errors": {
                    name: [{"code": "invalid", "detail": message} for message in messages]
                    for name, messages in outcome.errors.items()
                },
            }
            for outcome in outcomes
        ]
        body: dict[str, Any] = {
            **BatchSerializer(row).data,
            "outcomes": BulkOutcomeSerializer(outcome_rows, many=True).data,
        }
        response = Response(body, status=status.HTTP_201_CREATED)
        return warn_if_unserved(response, {task["queue"] for task in data["tasks"]})

    @document(
        operation_id="get_batch",
        summary="One batch and its progress",
        responses={200: BatchSerializer, **errors(400, 401, 403, 404)},
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(BatchSerializer(get_batch(pk)).data)

    @document(
        operation_id="batch_results",
        summary="A page of a batch's results",
        description=(
            "The completed tasks' results in task order, `page_size` at a time (default 100, "
            f"at most {MAX_RESULTS_PAGE}); pass the answer's `next` as `after` for the next "
            "page."
        ),
        parameters=[
            OpenApiParameter("after", int, description="The `next` of the previous page."),
            OpenApiParameter("page_size", int, description="Results per page."),
        ],
        responses={200: BatchResultsSerializer, **errors(400, 401, 403, 404)},
    )
    @action(detail=True, methods=["get"])
    def results(self, request: Request, pk: str) -> Response:
        batch = get_batch(pk)
        size = strict_page_size(request, "page_size", 100, MAX_RESULTS_PAGE)
        raw = request.query_params.get("after")
        after: int | None = None
        if raw is not None:
            if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
                raise ValidationError(
                    {"after": [ErrorDetail("A task id: a whole number.", code="invalid")]}
                )
            after = int(raw)
        page = batch.results(after=after, limit=size + 1)
        more = len(page) > size
        page = page[:size]
        body = {
            "results": [{"rn": rn, "result": result} for _, rn, result in page],
            "next": page[-1][0] if more and page else None,
        }
        return Response(BatchResultsSerializer(body).data)

    @detail_post(
        operation_id="cancel_batch",
        summary="Cancel a batch",
        description=(
            "Cancels the batch's ready and running tasks and its callbacks not yet released. "
            "409 `invalid_transition` if it was cancelled already."
        ),
        request=CancelSerializer,
        responses={200: BatchSerializer, **errors(400, 401, 403, 404, 409, 413)},
    )
    def cancel(self, request: Request, pk: str) -> Response:
        self.parse(CancelSerializer)
        batch = get_batch(pk)
        cancel_batch(batch)
        return Response(BatchSerializer(get_batch(pk)).data)
