"""Every error the API returns is `{"code": "...", "detail": "..."}` with the right status.

| raised | status | code |
|---|---|---|
| `TaskNotFound`, `WorkerNotFound` | 404 | `task_not_found`, `worker_not_found` |
| `DuplicateTask`, `InvalidTransition`, `LeaseLost`, `TaskCancelled` | 409 | the error's `code` |
| `DuplicateKey` (a held unique key, `on_conflict="raise"`) | 409 | `duplicate`, `rn`, `key` |
| `NotSupportedError` (keys on a database that cannot enforce them: MySQL) | 409 | `not_supported` |
| `QueueFull` (a cap on ready tasks) | 429, `Retry-After` | `queue_full`, `scope`, `max_ready` |
| a throttle's refusal (`SCYLLA["THROTTLE_RATES"]`) | 429, `Retry-After` | `throttled` |
| Django or DRF `ValidationError` | 400 | `invalid`, with `errors` per field (see below) |
| a body over `DATA_UPLOAD_MAX_MEMORY_SIZE` | 413 | `too_large` |
| other DRF errors (401, 403, 404, 405, 415, …) | theirs | DRF's code, e.g. `not_authenticated` |

A 400 also has `errors`: `{"<field>": [{"code": "...", "detail": "..."}]}`, where a nested field
is named by its path (`errors.0.code`) and errors about the body as a whole are under
`non_field_errors`.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import NotSupportedError
from django.http import Http404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.settings import api_settings
from rest_framework.views import set_rollback

from ..exceptions import (
    DuplicateKey,
    DuplicateTask,
    InvalidTransition,
    QueueFull,
    ScyllaError,
    TaskNotFound,
    WorkerNotFound,
)

FieldErrors = dict[str, list[dict[str, str]]]

NOT_FOUND: tuple[type[ScyllaError], ...] = (TaskNotFound, WorkerNotFound)
CONFLICT: tuple[type[ScyllaError], ...] = (DuplicateTask, InvalidTransition)


class RequestTooLarge(exceptions.APIException):
    """The request body is larger than `DATA_UPLOAD_MAX_MEMORY_SIZE`."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = gettext_lazy("The request body is too large.")
    default_code = "too_large"


class BadRequest(exceptions.APIException):
    """A request Django refused as malformed (e.g. too many query parameters)."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = gettext_lazy("Bad request.")
    default_code = "bad_request"


def field_errors(detail: Any, path: str = "") -> FieldErrors:
    """Flatten DRF's nested error detail into `{"<path>": [{"code", "detail"}]}`."""
    found: FieldErrors = {}
    if isinstance(detail, dict):
        items: list[tuple[str, Any]] = [(str(key), value) for key, value in detail.items()]
    elif isinstance(detail, list):
        items = [
            (str(index), value) if isinstance(value, dict | list) else ("", value)
            for index, value in enumerate(detail)
        ]
    else:
        code = getattr(detail, "code", None) or "invalid"
        return {path or api_settings.NON_FIELD_ERRORS_KEY: [{"code": code, "detail": str(detail)}]}
    for key, value in items:
        child = f"{path}.{key}" if path and key else key or path
        for name, errors in field_errors(value, child).items():
            found.setdefault(name, []).extend(errors)
    return found


def _convert(exc: Exception) -> Exception:
    """Django's own exceptions, as the DRF exceptions that stand for them."""
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, RequestDataTooBig):
        return RequestTooLarge(
            _("The request body is larger than %(size)d bytes.")
            % {"size": settings.DATA_UPLOAD_MAX_MEMORY_SIZE}
        )
    if isinstance(exc, SuspiciousOperation):
        return BadRequest()
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    return exc


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """The API's error responses; anything not handled here is a bug (and a 500)."""
    if isinstance(exc, NOT_FOUND + CONFLICT):
        set_rollback()
        not_found = isinstance(exc, NOT_FOUND)
        conflict: dict[str, Any] = {"code": exc.code, "detail": exc.detail}
        if isinstance(exc, DuplicateKey):
            conflict.update(rn=exc.rn, key=exc.key)
        return Response(
            conflict,
            status=status.HTTP_404_NOT_FOUND if not_found else status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, QueueFull):
        set_rollback()
        return Response(
            {
                "code": exc.code,
                "detail": exc.detail,
                "scope": exc.scope,
                "max_ready": exc.max_ready,
            },
            status=status.HTTP_429_TOO_MANY_REQUESTS,
            headers={"Retry-After": str(exc.retry_after)},
        )
    if isinstance(exc, NotSupportedError):
        # The request is valid; this server's database cannot do what it asks (a unique key on
        # MySQL). Nothing was written.
        set_rollback()
        return Response(
            {"code": "not_supported", "detail": str(exc)}, status=status.HTTP_409_CONFLICT
        )
    exc = _convert(exc)
    if not isinstance(exc, exceptions.APIException):
        return None
    headers: dict[str, str] = {}
    if auth_header := getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = auth_header
    if wait := getattr(exc, "wait", None):
        headers["Retry-After"] = str(max(1, math.ceil(wait)))
    body: dict[str, Any]
    if isinstance(exc, exceptions.ValidationError):
        errors = field_errors(exc.detail) or field_errors(
            exceptions.ErrorDetail(_("Invalid input."))
        )
        name, [first, *_others] = next(iter(errors.items()))
        more = sum(len(e) for e in errors.values()) - 1
        summary = f"{name}: {first['detail']}" + (f" (and {more} more)" if more else "")
        body = {"code": "invalid", "detail": summary, "errors": errors}
    else:
        detail = exc.detail
        body = {"code": getattr(detail, "code", None) or exc.default_code, "detail": str(detail)}
    set_rollback()
    return Response(body, status=exc.status_code, headers=headers)
