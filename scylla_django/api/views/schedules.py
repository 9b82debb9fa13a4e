"""The schedules of the REST API: list, create, read, change, delete and run one now; why one
does not fire now, and its calendar of next runs."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ErrorDetail, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ... import db, schedules
from ...models import Schedule
from ...schedules import calendars, constraints, firings
from .. import permissions
from ..pagination import strict_page_size
from ..schema import detail_post, document, errors
from ..serializers.base import CancelSerializer
from ..serializers.schedules import (
    CalendarEntrySerializer,
    ScheduleDetailSerializer,
    ScheduleInputSerializer,
    ScheduleSerializer,
    WhySerializer,
)
from ..serializers.tasks import TaskSerializer
from .base import ScyllaView


def get_schedule(name: str) -> Schedule:
    """The schedule called `name`, or a 404 `schedule_not_found`."""
    found = Schedule.objects.select_related("waiting").filter(name=name)
    schedule = found.first() if len(name) <= 100 else None
    if schedule is None:
        raise NotFound(
            _("No schedule is called %(name)r.") % {"name": name}, code="schedule_not_found"
        )
    return schedule


class ScheduleViewSet(ScyllaView, viewsets.GenericViewSet[Schedule]):
    """Recurring schedules: list, create, read, change (PATCH), delete, and run one now.

    Schedules from `SCYLLA["SCHEDULES"]` are the settings': only `enabled` may change here.
    """

    queryset = Schedule.objects.select_related("waiting")
    serializer_class = ScheduleSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    pagination_class = None
    http_method_names = ["get", "post", "patch", "delete", "head"]
    required_permissions = {
        "list": "scylla_django.view_schedule",
        "retrieve": "scylla_django.view_schedule",
        "create": "scylla_django.add_schedule",
        "partial_update": "scylla_django.change_schedule",
        "destroy": "scylla_django.delete_schedule",
        "run": permissions.SUBMIT,
        "why": "scylla_django.view_schedule",
        "calendar": "scylla_django.view_schedule",
    }

    def allowed_query_params(self) -> frozenset[str]:
        return frozenset({"count"}) if self.action == "calendar" else frozenset()

    @document(
        operation_id="list_schedules",
        summary="List schedules",
        responses={200: ScheduleSerializer(many=True), **errors(401, 403)},
    )
    def list(self, request: Request) -> Response:
        found = Schedule.objects.select_related("waiting")
        return Response(ScheduleSerializer(found, many=True).data)

    @document(
        operation_id="get_schedule",
        summary="One schedule",
        responses={200: ScheduleDetailSerializer, **errors(401, 403, 404)},
    )
    def retrieve(self, request: Request, name: str) -> Response:
        return Response(ScheduleDetailSerializer(get_schedule(name)).data)

    @document(
        operation_id="create_schedule",
        summary="Create a schedule",
        request=ScheduleInputSerializer,
        responses={201: ScheduleSerializer, **errors(400, 401, 403, 409)},
    )
    def create(self, request: Request) -> Response:
        data = self.parse(ScheduleInputSerializer)
        name = data.pop("name", None)
        if name is None:
            raise ValidationError({"name": [ErrorDetail(_("This field is required."), "required")]})
        definition = schedules.clean_definition(name, data)
        try:
            with transaction.atomic():
                schedule = Schedule.objects.create(
                    name=name, enabled=definition.enabled, **definition.fields()
                )
        except IntegrityError:
            return Response(
                {
                    "code": "duplicate_schedule",
                    "detail": _("A schedule %(name)r exists.") % {"name": name},
                },
                status=status.HTTP_409_CONFLICT,
            )
        schedules.reschedule(schedule)
        return Response(ScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)

    @document(
        operation_id="update_schedule",
        summary="Change a schedule",
        request=ScheduleInputSerializer,
        responses={200: ScheduleSerializer, **errors(400, 401, 403, 404, 409)},
    )
    def partial_update(self, request: Request, name: str) -> Response:
        schedule = get_schedule(name)
        data = self.parse(ScheduleInputSerializer)
        if data.get("name", name) != name:
            raise ValidationError(
                {"name": [ErrorDetail("A schedule cannot be renamed.", "invalid")]}
            )
        data.pop("name", None)
        if schedule.from_settings and set(data) - {"enabled"}:
            return from_settings_conflict(schedule)
        raw = {**_definition_dict(schedule), **data}
        if data.get("cron"):
            raw.pop("every", None)
            raw.pop("trigger", None)
        if data.get("every") is not None:
            raw.pop("cron", None)
            raw.pop("trigger", None)
        if data.get("trigger") is not None:
            raw.pop("cron", None)
            raw.pop("every", None)
        definition = schedules.clean_definition(name, raw)
        fields = {**definition.fields(), "enabled": definition.enabled}
        for key, value in fields.items():
            setattr(schedule, key, value)
        schedule.save(update_fields=[*fields])
        if set(data) - {"enabled"} or (data.get("enabled") and schedule.next_run is None):
            schedules.reschedule(schedule)
        return Response(ScheduleSerializer(schedule).data)

    @document(
        operation_id="delete_schedule",
        summary="Delete a schedule",
        responses={204: None, **errors(401, 403, 404, 409)},
    )
    def destroy(self, request: Request, name: str) -> Response:
        schedule = get_schedule(name)
        if schedule.from_settings:
            return from_settings_conflict(schedule)
        schedules.delete(Schedule.objects.filter(pk=schedule.pk))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @detail_post(
        operation_id="run_schedule",
        summary="Run a schedule now",
        description="Submit the schedule's task at once, outside its ticks.",
        request=CancelSerializer,
        responses={201: TaskSerializer, **errors(400, 401, 403, 404)},
    )
    def run(self, request: Request, name: str) -> Response:
        self.parse(CancelSerializer)
        task = schedules.run_now(get_schedule(name))
        return Response(TaskSerializer(task).data, status=status.HTTP_201_CREATED)

    @document(
        operation_id="why_schedule",
        summary="Why a schedule does not fire now",
        description=(
            "The run constraints unmet now (window, min_gap, max_runs, max_concurrent), and "
            "the firing that waits for them, if any; for a trigger, where it counts events "
            "from (its watermark), what is unmet and the firings waiting for its delay."
        ),
        responses={200: WhySerializer, **errors(401, 403, 404)},
    )
    @action(detail=True, methods=["get"])
    def why(self, request: Request, name: str) -> Response:
        answer = firings.why(get_schedule(name), db.read_clock("default"))
        return Response(WhySerializer(answer).data)

    @document(
        operation_id="schedule_calendar",
        summary="A schedule's next runs",
        description=(
            "The next `count` ticks (default 10, at most "
            f"{calendars.MAX_CALENDAR}) with daylight-saving gaps and repeated hours marked and "
            "the windows applied."
        ),
        parameters=[OpenApiParameter("count", int, description="How many ticks.")],
        responses={200: CalendarEntrySerializer(many=True), **errors(400, 401, 403, 404)},
    )
    @action(detail=True, methods=["get"])
    def calendar(self, request: Request, name: str) -> Response:
        schedule = get_schedule(name)
        count = strict_page_size(request, "count", 10, calendars.MAX_CALENDAR)
        entries = calendars.calendar(schedule, db.read_clock("default"), count)
        rows = [{**vars(e), "local": e.local.isoformat()} for e in entries]
        return Response(CalendarEntrySerializer(rows, many=True).data)


def from_settings_conflict(schedule: Schedule) -> Response:
    return Response(
        {
            "code": "from_settings",
            "detail": _(
                "Schedule %(name)r comes from SCYLLA['SCHEDULES']: change it there (only "
                "`enabled` can be changed here)."
            )
            % {"name": schedule.name},
        },
        status=status.HTTP_409_CONFLICT,
    )


def _definition_dict(schedule: Schedule) -> dict[str, Any]:
    raw: dict[str, Any] = {
        key: getattr(schedule, key)
        for key in ("timezone", "queue", "spec", "priority", "enabled", "catch_up")
    }
    raw["skip_if_running"] = schedule.skip_if_running
    for key in constraints.CONSTRAINT_KEYS:
        value = getattr(schedule, key)
        if value not in (None, "", []):
            raw[key] = value
    if schedule.cron:
        raw["cron"] = schedule.cron
    if schedule.every is not None:
        raw["every"] = schedule.every
    if schedule.trigger is not None:
        raw["trigger"] = schedule.trigger
    return raw
