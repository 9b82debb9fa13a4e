"""A ready task's forecast (`GET` or `POST /tasks/{rn}/eta/`, docs/howto/eta.md): when it is
expected to start under the rules in force, or under a what-if. Nothing is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter
from rest_framework.decorators import action
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ...models.forecast import WhatIf
from ..schema import document, errors
from ..serializers.forecast import ForecastSerializer
from .base import ScyllaView, get_task

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


class ForecastRoutes(ScyllaView):
    """The routes that forecast a ready task's start."""

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
