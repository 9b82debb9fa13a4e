"""The key routes, for operators: the locks held now, the limits and rates with their use (and
changing them), and force-releasing a hold (docs/howto/http-api.md)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from ...conf import scylla_settings
from ...models import Limit, Rate, Task, key_control
from ...validation import key_name
from .. import permissions
from ..schema import document, errors
from ..serializers.base import CancelSerializer
from ..serializers.keys import (
    LimitChangeSerializer,
    LimitInputSerializer,
    LimitSerializer,
    LockHeldSerializer,
    RateChangeSerializer,
    RateInputSerializer,
    RateSerializer,
    ReleasedSerializer,
)
from .base import ScyllaView


class LockView(ScyllaView):
    """The locks held now, by running tasks and by holds."""

    required_permissions = {"get": permissions.VIEW}

    @document(
        operation_id="list_locks",
        summary="Locks held",
        description=(
            "Every lock held now, by key: each running task that names it (`holder`, since "
            "its lease, until its lease deadline) and each live hold of code outside tasks "
            "(`hold`, the token `POST /holds/{token}/release/` takes). Read when asked."
        ),
        responses={200: LockHeldSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(
            LockHeldSerializer(key_control.held_locks(Task.objects.all()), many=True).data
        )


def _named(name: str, kind: str) -> str:
    """`name` from the path if it can be a key's name, else 404 `<kind>_not_found`."""
    try:
        return key_name(name, kind)
    except DjangoValidationError:
        raise NotFound(f"No {kind} can be called {name!r}.", code=f"{kind}_not_found") from None


def _limit(name: str) -> Response:
    (use,) = [limit for limit in key_control.limit_use(Task.objects.all()) if limit.name == name]
    return Response(LimitSerializer(use).data)


def _rate(name: str) -> Response:
    (use,) = [rate for rate in key_control.rate_use() if rate.name == name]
    return Response(RateSerializer(use).data)


class LimitListView(ScyllaView):
    """The limits with their use; `POST` makes or changes one."""

    required_permissions = {"get": permissions.VIEW, "post": permissions.CONTROL}

    @document(
        operation_id="list_limits",
        summary="Limits and their use",
        description=(
            "Every limit (a row, or in `SCYLLA['LIMITS']` and not used yet) with the running "
            "tasks holding one of its slots now."
        ),
        responses={200: LimitSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(LimitSerializer(key_control.limit_use(Task.objects.all()), many=True).data)

    @document(
        operation_id="set_limit",
        summary="Make or change a limit",
        description=(
            "One write: the next lease uses the new size; running tasks keep their slots. "
            "Needs `scylla_django.control_queue`."
        ),
        request=LimitInputSerializer,
        responses={200: LimitSerializer, **errors(400, 401, 403, 413)},
    )
    def post(self, request: Request) -> Response:
        data = self.parse(LimitInputSerializer)
        limit = key_control.set_limit(data["name"], data["max_running"])
        return _limit(limit.name)


class LimitDetailView(ScyllaView):
    """`PATCH` changes a limit's size."""

    http_method_names = ["patch", "head"]
    required_permissions = {"patch": permissions.CONTROL}

    @document(
        operation_id="change_limit",
        summary="Change a limit",
        description=(
            "One write. 404 `limit_not_found` for a limit that is neither a row nor in "
            "`SCYLLA['LIMITS']` (make one with `POST /limits/`). Needs "
            "`scylla_django.control_queue`."
        ),
        request=LimitChangeSerializer,
        responses={200: LimitSerializer, **errors(400, 401, 403, 404, 413)},
    )
    def patch(self, request: Request, name: str) -> Response:
        name = _named(name, "limit")
        data = self.parse(LimitChangeSerializer)
        known = name in scylla_settings.LIMITS or Limit.objects.filter(name=name).exists()
        if not known:
            raise NotFound(f"No limit is called {name!r}.", code="limit_not_found")
        key_control.set_limit(name, data["max_running"])
        return _limit(name)


class RateListView(ScyllaView):
    """The rates with their use; `POST` makes or changes one."""

    required_permissions = {"get": permissions.VIEW, "post": permissions.CONTROL}

    @document(
        operation_id="list_rates",
        summary="Rates and their use",
        description=(
            "Every rate (a row, or in `SCYLLA['RATES']`) with its starts within its period now."
        ),
        responses={200: RateSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(RateSerializer(key_control.rate_use(), many=True).data)

    @document(
        operation_id="set_rate",
        summary="Make or change a rate",
        description=(
            "One write; the starts already made count against the new rate. Needs "
            "`scylla_django.control_queue`."
        ),
        request=RateInputSerializer,
        responses={200: RateSerializer, **errors(400, 401, 403, 413)},
    )
    def post(self, request: Request) -> Response:
        data = self.parse(RateInputSerializer)
        rate = key_control.set_rate(data["name"], data["rate"])
        return _rate(rate.name)


class RateDetailView(ScyllaView):
    """`PATCH` changes a rate."""

    http_method_names = ["patch", "head"]
    required_permissions = {"patch": permissions.CONTROL}

    @document(
        operation_id="change_rate",
        summary="Change a rate",
        description=(
            "One write. 404 `rate_not_found` for a rate that is neither a row nor in "
            "`SCYLLA['RATES']`. Needs `scylla_django.control_queue`."
        ),
        request=RateChangeSerializer,
        responses={200: RateSerializer, **errors(400, 401, 403, 404, 413)},
    )
    def patch(self, request: Request, name: str) -> Response:
        name = _named(name, "rate")
        data = self.parse(RateChangeSerializer)
        known = name in scylla_settings.RATES or Rate.objects.filter(name=name).exists()
        if not known:
            raise NotFound(f"No rate is called {name!r}.", code="rate_not_found")
        key_control.set_rate(name, data["rate"])
        return _rate(name)


class HoldReleaseView(ScyllaView):
    """`POST` force-releases a hold."""

    http_method_names = ["post", "head"]
    required_permissions = {"post": permissions.CONTROL}

    @document(
        operation_id="release_hold",
        summary="Force-release a hold",
        description=(
            "Drops the hold (one write), whoever holds it: its lock is free for the next "
            "lease. 404 `hold_not_found` if it was released already. Needs "
            "`scylla_django.control_queue`."
        ),
        request=CancelSerializer,
        responses={200: ReleasedSerializer, **errors(400, 401, 403, 404, 413)},
    )
    def post(self, request: Request, token: int) -> Response:
        self.parse(CancelSerializer)
        if token >= 2**63 or not key_control.force_release_hold(token):
            raise NotFound(f"No hold has the token {token}.", code="hold_not_found")
        body: dict[str, Any] = {"hold": token, "released": True}
        return Response(ReleasedSerializer(body).data)
