"""The OpenAPI 3 schema (drf-spectacular): settings of the API's own schema view, and what the
generated schema must say beyond what drf-spectacular infers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import action

from .serializers.errors import ErrorSerializer

# Applied only while `GET /schema/` generates the schema (`custom_settings`), so a project's
# own SPECTACULAR_SETTINGS and schema views are left alone.
SCHEMA_SETTINGS: dict[str, Any] = {
    "TITLE": "Scylla tasks API",
    "DESCRIPTION": (
        "Submit, watch and cancel tasks; register workers that lease, heartbeat and finish "
        "them. Every error is `{code, detail}`; a 400 adds `errors` per field."
    ),
    "VERSION": "1",
    "PREPROCESSING_HOOKS": ["scylla_django.api.schema.only_this_api"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "scylla_django.api.schema.require_bodies",
    ],
    "ENUM_NAME_OVERRIDES": {
        "TaskStatusEnum": "scylla_django.enums.Status",
        "EventTypeEnum": "scylla_django.enums.EventType",
        "WorkerStateEnum": "scylla_django.enums.Liveness",
        "BatchStateEnum": "scylla_django.api.serializers.batches.BATCH_STATES",
    },
    "ENUM_ADD_EXPLICIT_BLANK_NULL_CHOICE": False,
}

ERROR_DESCRIPTIONS = {
    400: "Invalid input: `errors` says what, per field.",
    401: "Not authenticated (`not_authenticated`, `authentication_failed`).",
    403: "Missing permission (`permission_denied`), or another user's worker (`not_your_worker`).",
    404: "No such task (`task_not_found`), worker (`worker_not_found`), page (`invalid_cursor`) "
    "or format (`not_found`), or no log of the task (`no_log`).",
    409: "The transition is not allowed now: `invalid_transition`, `duplicate_task`, "
    "`lease_lost`, `task_cancelled` or `owner_alive`.",
    413: "The request body is larger than `DATA_UPLOAD_MAX_MEMORY_SIZE` (`too_large`).",
    429: "Too many: the queue or admission key holds its `max_ready` ready tasks "
    "(`queue_full`), or a request rate is spent (`throttled`); `Retry-After` says when to "
    "try again.",
}


F = TypeVar("F", bound=Callable[..., Any])


def document(*, operation_id: str, **kwargs: Any) -> Callable[[F], F]:
    """`extend_schema(operation_id=..., **kwargs)` on a view method, based on drf-spectacular's
    `AutoSchema`.

    Every operation names its `operation_id` (`verb_noun`: `submit_task`, `cancel_tasks`), so
    that a generated client's method names never depend on the routes or on their order.

    `extend_schema` bases a method's schema on DRF's `DEFAULT_SCHEMA_CLASS` unless the method
    names its own, and that setting is DRF's own inspector unless the project changed it. The
    method names drf-spectacular's here, so the API documents itself in any project.
    """

    def decorator(method: F) -> F:
        method.schema = AutoSchema  # type: ignore[attr-defined]
        decorated: F = extend_schema(operation_id=operation_id, **kwargs)(method)
        return decorated

    return decorator


def detail_post(
    *, operation_id: str, url_path: str | None = None, **kwargs: Any
) -> Callable[[F], F]:
    """A `POST` on one object (`…/{key}/<method name or url_path>/`), documented: DRF's
    `@action(detail=True, methods=["post"])` under `@document(operation_id=..., **kwargs)`."""
    routing: dict[str, Any] = {} if url_path is None else {"url_path": url_path}

    def decorator(method: F) -> F:
        routed: F = action(detail=True, methods=["post"], **routing)(method)  # type: ignore[assignment]
        return document(operation_id=operation_id, **kwargs)(routed)

    return decorator


def errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """The error responses of an operation, each with the error schema."""
    return {
        status: OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[status])
        for status in statuses
    }


def only_this_api(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """Keep this API's endpoints: the project may serve other DRF views as well."""
    return [
        endpoint
        for endpoint in endpoints
        if getattr(endpoint[3], "cls", None) is not None
        and endpoint[3].cls.__module__.startswith("scylla_django.api.")
    ]


def require_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Mark a request body as required when no absent body could be valid: a list (an absent
    body is not an empty list), or a choice of objects that each require a field.
    """
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            body = operation.get("requestBody", {})
            if any(_needs_body(m.get("schema", {})) for m in body.get("content", {}).values()):
                body["required"] = True
    return result


def _needs_body(schema: dict[str, Any]) -> bool:
    choices = schema.get("oneOf") or schema.get("anyOf")
    if choices:
        return all(choice.get("required") for choice in choices)
    return schema.get("type") == "array"


class StrictSerializerExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """Request bodies declare `additionalProperties: false`: unknown keys are rejected."""

    target_class = "scylla_django.api.serializers.base.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(  # type: ignore[no-untyped-call]
            self.target, direction, bypass_extensions=True
        )
        schema["additionalProperties"] = False
        return schema


class JSONValueFieldExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """A JSON value: any type, and null only where the field allows it.

    OpenAPI 3.0 has no "null" type to exclude, so a non-null JSON value is each other type.
    """

    target_class = "scylla_django.api.serializers.base.JSONValueField"

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        if self.target.allow_null:
            return {}
        types = [{"type": "object"}, {"type": "array", "items": {}}]
        return {"anyOf": [*types, {"type": "string"}, {"type": "number"}, {"type": "boolean"}]}
