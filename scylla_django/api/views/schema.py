"""The OpenAPI 3 schema route."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.views import SpectacularAPIView
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from ..schema import SCHEMA_SETTINGS, document, errors
from .base import ScyllaAuthMixin


class SchemaView(ScyllaAuthMixin, SpectacularAPIView):
    """The OpenAPI 3 schema of this API (YAML, or JSON with `?format=json`)."""

    permission_classes = [IsAuthenticated]
    custom_settings = SCHEMA_SETTINGS
    schema = AutoSchema()

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """Errors are JSON, like the rest of the API's, whatever format was asked for."""
        if response.status_code >= 400:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)

    @document(
        operation_id="get_schema",
        summary="The OpenAPI 3 schema",
        responses={200: OpenApiTypes.OBJECT, **errors(401, 404)},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if request.query_params.get("format") == "":
            raise NotFound("Choose a format: json or yaml.")
        response: Response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]
        return response
