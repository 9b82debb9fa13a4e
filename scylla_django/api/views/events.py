"""The events route: `POST /events/` emits an event, `GET /events/` lists the stored ones
(docs/howto/triggers.md)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Prefetch
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response

from ...models import Consumption, Event
from ...schedules import events
from .. import permissions
from ..filters import EventFilter, FilterBackend
from ..pagination import EventCursorPagination
from ..schema import document, errors
from ..serializers.events import EventInputSerializer, EventOutSerializer, EventSerializer
from .base import ScyllaView, listing_params


class EventView(ScyllaView, generics.GenericAPIView[Event]):
    """List the stored events; emit one, for the schedules whose trigger listens to its kind."""

    # An event may fire schedules, which submit tasks: the same right as submitting.
    required_permissions = {
        "get": permissions.VIEW,
        "head": permissions.VIEW,
        "post": permissions.SUBMIT,
    }
    filter_backends = [FilterBackend]
    filterset_class = EventFilter
    pagination_class = EventCursorPagination

    def allowed_query_params(self) -> frozenset[str]:
        if self.request.method not in ("GET", "HEAD"):
            return frozenset()
        return listing_params(EventFilter, EventCursorPagination)

    def get_queryset(self) -> Any:
        # One more query per page for the consuming schedules, whatever the page's size.
        consumers = Consumption.objects.select_related("schedule").only(
            "event_id", "schedule__name"
        )
        return Event.objects.prefetch_related(Prefetch("consumptions", queryset=consumers))

    @document(
        operation_id="list_events",
        summary="List events",
        description=(
            "The stored events, newest first, a cursor page at a time, each with the schedules "
            "whose firings consumed it (`consumed_by`). Filter by `kind`, by time (`since` "
            "inclusive, `until` exclusive), by `consumed` (by any schedule, or by none) and by "
            "the consuming `schedule`."
        ),
        responses={200: EventSerializer(many=True), **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        found = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(EventSerializer(found, many=True).data)

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
