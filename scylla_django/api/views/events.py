"""The events route: `POST /events/` emits an event (README, "Triggers")."""

from __future__ import annotations

from django.db import transaction
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ... import events
from .. import permissions
from ..schema import document, errors
from ..serializers import EventInputSerializer, EventOutSerializer
from .base import ScyllaView


class EventView(ScyllaView):
    """Emit an event, for the schedules whose trigger listens to its kind."""

    # An event may fire schedules, which submit tasks: the same right as submitting.
    required_permissions = {"post": permissions.SUBMIT}

    @document(
        operation_id="emit_event",
        summary="Emit an event",
        description=(
            "Store an event of `kind` with its `payload` (a JSON object). The schedules whose "
            "trigger it meets fire at the monitor's next pass. A kind no trigger listens to "
            "is allowed."
        ),
        request=EventInputSerializer,
        responses={201: EventOutSerializer, **errors(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        data = self.parse(EventInputSerializer)
        with transaction.atomic():
            event = events.emit(data["kind"], data.get("payload", {}))
        event.refresh_from_db(fields=["time"])
        return Response(EventOutSerializer(event).data, status=status.HTTP_201_CREATED)
