"""The routes of durable execution (`docs/howto/durable.md`): what a task's runs recorded
(`GET tasks/{rn}/steps/`); an HTTP worker's steps, cursor and waits, each fenced on the
lease it holds; and signals, sent by a client (`POST tasks/{rn}/signals/{name}/`) or by
whoever holds a task's signal token (`POST signals/{token}/`)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from ...models import Task, TaskSignal, WaitKind
from ...models.waits import WaitFor, durable_record, read_signal_token
from ...schedules.events import validate_kind, validate_match
from ...validation import validate_delay
from ..schema import detail_post, document, errors
from ..serializers.durable import (
    CheckpointInputSerializer,
    DurableSerializer,
    SignalInputSerializer,
    SignalSerializer,
    StepInputSerializer,
    StepSerializer,
    WaitAnswerSerializer,
    WaitInputSerializer,
)
from .base import WORKER_ERRORS, ScyllaView, get_task


def wanted_wait(data: dict[str, Any]) -> WaitFor:
    """The wait a `WaitInputSerializer` body asks for (ValidationError for a bad one)."""
    kind, name, timeout = data["kind"], data["name"], data.get("timeout")
    timeout = None if timeout is None else validate_delay(timeout)
    if kind == WaitKind.SLEEP:
        if timeout is None:
            raise ValidationError("A sleep needs its timeout.", code="required")
        return WaitFor(name, kind, duration=timeout)
    if kind == WaitKind.EVENT:
        if "event_kind" not in data:
            raise ValidationError("An event wait needs its event_kind.", code="required")
        match = validate_match(data.get("match"))
        return WaitFor(name, kind, timeout, validate_kind(data["event_kind"]), match)
    if "signal" not in data:
        raise ValidationError("A signal wait needs its signal.", code="required")
    return WaitFor(name, kind, timeout, signal=data["signal"])


class DurableRoutes(ScyllaView):
    """The routes under `tasks/{rn}/` of durable execution."""

    @document(
        operation_id="get_task_steps",
        summary="A task's steps, cursor, waits and signals",
        description=(
            "What the task's runs recorded: its completed steps (name, result, its size in "
            "bytes, when, under which lease number), its cursor, its durable waits (what each "
            "waits for, until when, how it ended) and the signals it was sent."
        ),
        responses={200: DurableSerializer, **errors(400, 401, 403, 404)},
    )
    @action(detail=True, methods=["get"])
    def steps(self, request: Request, rn: str) -> Response:
        return Response(DurableSerializer(durable_record(get_task(rn))).data)

    @detail_post(
        operation_id="record_task_step",
        url_path="step",
        summary="Record a step",
        description=(
            "Record the step `name` with its `result` (JSON within the result size limit), "
            "fenced on the lease. 409 `step_already_recorded` if the task has one of that "
            "name, `lease_lost` when the lease is not held; nothing is written then."
        ),
        request=StepInputSerializer,
        responses={201: StepSerializer, **WORKER_ERRORS},
    )
    def record_step(self, request: Request, rn: str) -> Response:
        worker, task, data = self.parse_held(StepInputSerializer, rn)
        step = task.record_step(worker, data["name"], data["result"], lease=data["lease"])
        return Response(StepSerializer(step).data, status=status.HTTP_201_CREATED)

    @detail_post(
        operation_id="checkpoint_task",
        summary="Write the task's cursor",
        description="Where a later run takes up a long loop, fenced on the lease.",
        request=CheckpointInputSerializer,
        responses={200: StepSerializer, **WORKER_ERRORS},
    )
    def checkpoint(self, request: Request, rn: str) -> Response:
        worker, task, data = self.parse_held(CheckpointInputSerializer, rn)
        step = task.checkpoint(worker, data["cursor"], lease=data["lease"])
        return Response(StepSerializer(step).data)

    @detail_post(
        operation_id="wait_task",
        summary="Begin a durable sleep or wait",
        description=(
            "Begin the wait `name` (or take it up again on a later run): a `sleep` for "
            "`timeout`, or a wait for an `event` of `event_kind` matching `match`, or for the "
            "`signal`, at most `timeout`. A wait that ended answers `parked: false` with its "
            "`outcome` and `payload`; one still open parks the task (`parked: true`): the "
            "lease is given back, and the worker must stop working on the task."
        ),
        request=WaitInputSerializer,
        responses={200: WaitAnswerSerializer, **WORKER_ERRORS},
    )
    def wait(self, request: Request, rn: str) -> Response:
        worker, task, data = self.parse_held(WaitInputSerializer, rn)
        wait = task.begin_wait(worker, wanted_wait(data), lease=data["lease"])
        return Response(WaitAnswerSerializer({"parked": wait.outcome is None, "wait": wait}).data)

    @detail_post(
        operation_id="signal_task",
        url_path=r"signals/(?P<name>[A-Za-z0-9_][A-Za-z0-9_.:#-]*)",
        summary="Send a task a signal",
        description=(
            "Keep the signal `name` with its `payload` for the task, and wake the task if it "
            "waits for it. A signal is delivered once: 409 `signal_already_sent` for a second "
            "of the same name, 409 `task_finished` for a finished task."
        ),
        request=SignalInputSerializer,
        responses={201: SignalSerializer, **errors(400, 401, 403, 404, 409)},
    )
    def signal(self, request: Request, rn: str, name: str) -> Response:
        data = self.parse(SignalInputSerializer)
        return signalled(get_task(rn), name, data["payload"])


def signalled(task: Task, name: str, payload: Any) -> Response:
    task.signal(name, payload)
    sent = TaskSignal.objects.get(task_id=task.pk, name=name)
    return Response(SignalSerializer(sent).data, status=status.HTTP_201_CREATED)


class SignalTokenView(ScyllaView):
    """`POST signals/{token}/`: the signal a task's token names, sent by whoever holds the
    token (`ctx.signal_token()`), with no other credentials."""

    authentication_classes = []
    permission_classes = [AllowAny]

    @document(
        operation_id="signal_by_token",
        summary="Send the signal a token names",
        description=(
            "The token (`ctx.signal_token(name)`) names a task and a signal; the body's "
            "`payload` is the signal's. Good once: 409 `signal_already_sent` after. 404 "
            "`invalid_token` for a token that is not one."
        ),
        request=SignalInputSerializer,
        responses={201: SignalSerializer, **errors(400, 404, 409)},
    )
    def post(self, request: Request, token: str) -> Response:
        data = self.parse(SignalInputSerializer)
        try:
            rn, name = read_signal_token(token)
        except ValidationError as exc:  # no such token: nothing it names is found
            raise NotFound(exc.messages[0], code="invalid_token") from None
        return signalled(get_task(rn), name, data["payload"])
