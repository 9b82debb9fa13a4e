"""A task's log (`GET /tasks/{rn}/log/`): what its handler logged in its last run, as plain
text."""

from __future__ import annotations

from django.http import HttpResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request

from ... import logs
from ..schema import document, errors
from .base import ScyllaView, get_task


class LogRoutes(ScyllaView):
    """The route that reads a task's log (`TASK_LOG_STORAGE`)."""

    @document(
        operation_id="get_task_log",
        summary="A task's log",
        description=(
            "What the task's handler logged in its last run (`ctx.logger` and the `logging` "
            "records of its thread), as plain text, capped at `TASK_LOG_MAX_BYTES`. 404 "
            "`no_log` when no run of it logged anything (or the log was deleted), or no log "
            "is kept (no `TASK_LOG_STORAGE` is named; the detail says so)."
        ),
        responses={
            (200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="The log."),
            **errors(400, 401, 403, 404),
        },
    )
    @action(detail=True, methods=["get"])
    def log(self, request: Request, rn: str) -> HttpResponse:
        text = get_task(rn).read_log()
        if text is None:
            why = logs.not_kept()
            detail = (
                _("Task %(rn)s has no log: %(why)s.") % {"rn": rn, "why": why}
                if why
                else _("Task %(rn)s has no log.") % {"rn": rn}
            )
            raise NotFound(detail, code="no_log")
        return HttpResponse(text, content_type="text/plain; charset=utf-8")
