"""What every view of the API shares: authentication, JSON in and out, the `{code, detail}`
errors, refused unknown query parameters, the task and worker lookups, and the 404 of a path
no route matches."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from typing import Any, ClassVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.openapi import AutoSchema
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import tracing
from ...exceptions import TaskNotFound
from ...models import Submitter, Task, Worker
from ...models.serving import unserved_queues, unserved_warning
from ...routers import databases, request_database
from ...validation import validate_rn
from ..authentication import ScyllaTokenAuthentication, authenticators
from ..exceptions import exception_handler
from ..parsers import ScyllaJSONParser
from ..permissions import HasActionPermission
from ..schema import errors
from ..throttles import THROTTLES

DATABASE_PARAMETER = "database"
UNSERVED_HEADER = "Scylla-Warning"
UNSERVED_QUEUE = "no live worker serves this queue"
#: The errors of an operation an HTTP worker makes on a task it holds.
WORKER_ERRORS = errors(400, 401, 403, 404, 409, 413)

logger = logging.getLogger("scylla_django")


def warn_if_unserved(response: Response, queues: Iterable[str]) -> Response:
    """Say so in a `Scylla-Warning` header when nothing serves a queue submitted to (the
    submission logged it already).

    Nothing serves a queue when this process has no handler for it and no live worker leases
    from it (see `models.serving`, which reads the workers at most every few seconds).
    """
    warnings = [unserved_warning(queue) for queue in unserved_queues(queues)]
    if warnings:
        response[UNSERVED_HEADER] = "; ".join(warnings)
    return response


class ScyllaAuthMixin:
    """Token (`Authorization: Token <key>`) or session authentication and the `{code, detail}`
    errors of `exceptions.py`, whatever the `REST_FRAMEWORK` setting says."""

    authentication_classes: Sequence[type[BaseAuthentication]] = [
        ScyllaTokenAuthentication,
        SessionAuthentication,
    ]

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get_authenticators(self) -> list[BaseAuthentication]:
        return authenticators(self.authentication_classes)


class ScyllaView(ScyllaAuthMixin, APIView):
    """What every view of the API shares, so that it needs no `REST_FRAMEWORK` setting.

    Token or session authentication, JSON in and out, the `{code, detail}` errors of
    `exceptions.py`, and no OPTIONS introspection.
    """

    permission_classes = [HasActionPermission]
    throttle_classes = THROTTLES
    parser_classes = [ScyllaJSONParser]
    renderer_classes = [JSONRenderer]
    metadata_class = None
    http_method_names = ["get", "post", "head"]
    schema = AutoSchema()
    required_permissions: ClassVar[dict[str, str | tuple[str, ...]]] = {}
    #: Whether the GETs read the primary even when `SCYLLA["READ_DATABASE"]` names a replica.
    reads_primary: ClassVar[bool] = False

    def allowed_query_params(self) -> frozenset[str]:
        """The query parameters this request may carry; any other is refused (400)."""
        return frozenset()

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        """The request, answered (and rendered) within the database it names (`initial`),
        and under the trace its `traceparent` header names, if any: the tasks it submits
        store it (docs/howto/tracing.md)."""
        self.database_scope = ExitStack()
        with self.database_scope, tracing.incoming(request.headers.get("traceparent")):
            response = super().dispatch(request, *args, **kwargs)
            render = getattr(response, "render", None)
            if render is not None and not getattr(response, "is_rendered", True):
                render()
        return response

    def choose_database(self, request: Request) -> None:
        """Run the rest of the request on the database it names with `?database=` (when
        queues are routed to several; `default` else): GETs read its replica when
        `SCYLLA["READ_DATABASE"]` names one (`routers.request_database`). An unknown alias
        is a 400 `unknown_database`."""
        name = request.query_params.get(DATABASE_PARAMETER)
        if name is not None and name not in databases():
            raise ValidationError(
                {
                    DATABASE_PARAMETER: [
                        ErrorDetail(
                            _("No database holds tasks under the alias %(name)r. Known: %(names)s.")
                            % {"name": name, "names": ", ".join(databases())},
                            code="unknown_database",
                        )
                    ]
                }
            )
        method = "POST" if self.reads_primary else request.method  # a primary's context
        self.database_scope.enter_context(request_database(name, method))

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """Authenticate and check permissions, then refuse unknown query parameters: a
        misspelt filter (`?stauts=ready`) would otherwise be ignored and select everything.
        """
        super().initial(request, *args, **kwargs)
        method = (request.method or "").lower()
        if method not in self.http_method_names or not hasattr(self, method):
            return  # a 405 follows
        allowed = self.allowed_query_params()
        if len(databases()) > 1:
            allowed |= {DATABASE_PARAMETER}
        unknown = sorted(set(request.query_params) - allowed)
        if unknown:
            hint = (
                _("Allowed: %(names)s.") % {"names": ", ".join(sorted(allowed))}
                if allowed
                else _("This operation takes no query parameters.")
            )
            raise ValidationError(
                {
                    name: [
                        ErrorDetail(
                            _("Unknown query parameter. %(hint)s") % {"hint": hint},
                            code="unknown_parameter",
                        )
                    ]
                    for name in unknown
                }
            )
        self.choose_database(request)

    def parse(self, serializer_class: type[Any]) -> dict[str, Any]:
        """The request body, validated by `serializer_class`; else a 400."""
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def get_worker(self, name: str) -> Worker:
        """The worker called `name` (404 `worker_not_found`), if the user may act as it (403)."""
        worker = Worker.objects.get_by_name(name)
        self.check_object_permissions(self.request, worker)
        return worker

    def parse_held(
        self, serializer_class: type[Any], rn: str
    ) -> tuple[Worker, Task, dict[str, Any]]:
        """For a worker operation: the body's worker, the task `rn`, and the rest of the body,
        whose `lease` (the lease number the worker holds) the write is fenced on."""
        data = self.parse(serializer_class)
        worker = self.get_worker(data.pop("worker"))
        return worker, get_task(rn), data

    def list_query_params(self, filterset: Any, paging: Any) -> frozenset[str]:
        """On `list`: the filters of `filterset` and the parameters of `paging`; else none."""
        if self.action != "list":  # type: ignore[attr-defined]
            return frozenset()
        return listing_params(filterset, paging)


def listing_params(filterset: Any, paging: Any) -> frozenset[str]:
    """The query parameters of a list: the filters of `filterset` and those of `paging`."""
    names = (
        paging.cursor_query_param,
        paging.page_size_query_param,
        getattr(paging, "ordering_query_param", None),
    )
    return frozenset(filterset.base_filters) | {name for name in names if name}


def submitter_of(request: Request, name: str = "", description: str = "") -> Submitter:
    """Who makes `request`: its user, with the API token it came with, if any."""
    key = getattr(request.auth, "key", None)
    return Submitter.of(
        request.user,
        token=key if isinstance(key, str) else None,
        name=name,
        description=description,
    )


def get_task(rn: str, *, with_history: bool = False) -> Task:
    """The task with this rn, or TaskNotFound (also for a string that cannot be an rn)."""
    try:
        validate_rn(rn)  # else the database would be asked about, e.g., a NUL character
    except DjangoValidationError:
        raise TaskNotFound(_("No task has rn %(rn)r.") % {"rn": rn}, rn=rn) from None
    tasks = Task.objects.prefetch_related("history") if with_history else Task.objects.all()
    return tasks.get_by_rn(rn)


@csrf_exempt  # a POST to no route is a 404 too, not Django's CSRF page: nothing is written
def not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any other path under the API, whatever the method: a 404 in the API's error format."""
    detail = _("No API route matches %(path)r.") % {"path": request.path}
    if not request.path.endswith("/"):
        detail += " " + _("Routes end with a slash.")
    return JsonResponse({"code": "not_found", "detail": detail}, status=404)
