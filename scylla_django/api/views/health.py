"""The health route for probes, as `manage.py scylla_health` runs its checks."""

from __future__ import annotations

from datetime import timedelta

from django.db import DEFAULT_DB_ALIAS
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from ...health import run_checks
from ...routers import reading_from
from ..schema import document, errors
from ..serializers.health import HealthQuerySerializer, HealthSerializer
from .base import ScyllaView


class HealthView(ScyllaView):
    """Health checks for probes, as `manage.py scylla_health` runs them: 200 or 503."""

    authentication_classes = []
    permission_classes = [AllowAny]
    reads_primary = True  # a probe asks about the database that leases and transitions use

    def allowed_query_params(self) -> frozenset[str]:
        return frozenset(HealthQuerySerializer().fields)

    @document(
        operation_id="check_health",
        summary="Health checks",
        description=(
            "No authentication, for load balancers and Kubernetes probes. The database is "
            "always checked; `hostname`, `monitor`, `max_lag` and `vacuum` add checks. 200 "
            "when every check passes, else 503; the body lists each check either way."
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
            using=reading_from() or DEFAULT_DB_ALIAS,  # `?database=` when queues are routed
            worker_host=options.get("hostname"),
            monitor=options["monitor"],
            max_lag=timedelta(seconds=max_lag) if max_lag is not None else None,
            queues=options.get("queue", []),
            vacuum=options["vacuum"],
        )
        healthy = all(check.ok for check in checks)
        body = {"status": "ok" if healthy else "failing", "checks": checks}
        return Response(
            HealthSerializer(body).data,
            status=status.HTTP_200_OK if healthy else status.HTTP_503_SERVICE_UNAVAILABLE,
        )
