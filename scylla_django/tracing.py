"""OpenTelemetry traces (the `otel` extra; docs/howto/tracing.md), the one module that imports
`opentelemetry`, and only when it is installed: without it every function here does nothing.

A submission stores the W3C `traceparent` of the span current when it is made (a web request's,
the handler's that spawns a child, a schedule's firing) beside its task (`models/traces.py`).
The worker runs the handler in a `process` span, as OpenTelemetry's messaging conventions have
it: a child of that span on the task's first run, a new trace linked to it on a later one (a
retry, or a run after a lease that expired). The span starts at the lease (an event `lease`),
records each heartbeat (an event `heartbeat`) and the outcome (an event `finish`), and is the
current span while the handler runs, so the handler's own spans and the children it spawns
hang under it.

Spans are made only when a tracer provider is configured (the SDK's, or another); without one
the worker does not even read the stored traceparents.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.core.exceptions import ValidationError

from .validation import validate_traceparent

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError:  # the otel extra is not installed
    trace = None  # type: ignore[assignment]
    otel_context = None  # type: ignore[assignment]

#: The instrumentation scope of the spans.
TRACER_NAME = "scylla_django"
#: `messaging.system` of the spans.
MESSAGING_SYSTEM = "scylla"

#: The traceparent a request came with (`incoming`), for the submissions it makes.
_incoming: ContextVar[str | None] = ContextVar("scylla_django_traceparent", default=None)


def available() -> bool:
    """Whether the OpenTelemetry API is installed."""
    return trace is not None


def enabled() -> bool:
    """Whether spans are recorded: the API is installed and a tracer provider configured."""
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def current_traceparent() -> str | None:
    """The `traceparent` of the current span; else the one a request came with (`incoming`);
    else None."""
    if trace is None:
        return _incoming.get()
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return _incoming.get()
    return (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
        f"{int(span_context.trace_flags):02x}"
    )


@contextmanager
def incoming(traceparent: str | None) -> Iterator[None]:
    """In the block, submissions made without a current span store `traceparent` (a request's
    `traceparent` header; one that is not a valid W3C traceparent is ignored, as the W3C
    recommendation asks of a receiver). With OpenTelemetry installed, a span current in the
    block (the request's own, when the web server is instrumented) comes first."""
    try:
        valid = None if traceparent is None else validate_traceparent(traceparent.strip())
    except ValidationError:
        valid = None
    token = _incoming.set(valid)
    try:
        yield
    finally:
        _incoming.reset(token)


def span_context(traceparent: str | None) -> Any:
    """The remote `SpanContext` a stored traceparent names (None: none, or not valid)."""
    if trace is None or traceparent is None:
        return None
    try:
        validate_traceparent(traceparent)
    except ValidationError:
        return None
    _, trace_id, span_id, flags = traceparent.split("-")
    return trace.SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(int(flags, 16)),
    )


def _wall_ns(monotonic: float) -> int:
    """A moment of this process's monotonic clock as nanoseconds of the wall clock."""
    return time.time_ns() - int((time.monotonic() - monotonic) * 1e9)


@contextmanager
def process_span(
    queue: str,
    tasks: Sequence[Any],
    traceparents: Sequence[str | None],
    worker: str,
    leased: float,
) -> Iterator[Any]:
    """The `process` span of a handler's run of `tasks` (one, or a batch's members), made
    current in the block; None when spans are not recorded.

    A single task's first run (attempt 1, lease 1) is a child of the span its traceparent
    names; a later run, and a batch, starts a new trace that links to each stored span.
    `leased` (monotonic) is when the lease was taken: the span starts there, with the event
    `lease`.
    """
    if trace is None or not enabled():
        yield None
        return
    remote = [span_context(tp) for tp in traceparents]
    first = len(tasks) == 1 and tasks[0].attempt == 1 and tasks[0].leases == 1
    parent = remote[0] if first else None
    links = [] if parent is not None else [trace.Link(sc) for sc in remote if sc is not None]
    context = (
        trace.set_span_in_context(trace.NonRecordingSpan(parent))
        if parent is not None
        else otel_context.Context()  # a new trace: not the caller's, whatever it runs in
    )
    attributes: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": queue,
        "scylla.worker": worker,
    }
    if len(tasks) == 1:
        task = tasks[0]
        attributes.update(
            {
                "messaging.message.id": task.rn,
                "scylla.attempt": task.attempt,
                "scylla.lease": task.leases,
            }
        )
    else:
        attributes["messaging.batch.message_count"] = len(tasks)
    start = _wall_ns(leased)
    span = trace.get_tracer(TRACER_NAME).start_span(
        f"process {queue}",
        context=context,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        start_time=start,
    )
    span.add_event("lease", {"scylla.worker": worker}, timestamp=start)
    with trace.use_span(span, end_on_exit=True, record_exception=False):
        yield span


def heartbeat(span: Any, progress: float) -> None:
    """Record a heartbeat that extended the lease of the run of `span` (None: nothing)."""
    if span is not None and span.is_recording():
        span.add_event("heartbeat", {"scylla.progress": progress})


def finish(span: Any, outcome: str, error: dict[str, Any] | None = None) -> None:
    """Record how the run of `span` ended: `completed`, `aborted` (with its `error`),
    `snoozed` or `stopped` (None: nothing). An abort sets the span's status to ERROR."""
    if span is None or not span.is_recording():
        return
    attributes: dict[str, Any] = {"scylla.outcome": outcome}
    if error is not None:
        attributes["scylla.error.code"] = str(error.get("code", ""))
        span.set_attribute("error.type", str(error.get("code", "")))
        span.set_status(trace.StatusCode.ERROR, str(error.get("description", "")))
    span.add_event("finish", attributes)


@contextmanager
def firing_span(schedule: str, queue: str) -> Iterator[None]:
    """A `send` span around a schedule's firing (a tick or a trigger's), so the task it
    submits is traced (nothing when spans are not recorded)."""
    if trace is None or not enabled():
        yield
        return
    with trace.get_tracer(TRACER_NAME).start_as_current_span(
        f"send {queue}",
        kind=trace.SpanKind.PRODUCER,
        attributes={
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "send",
            "messaging.destination.name": queue,
            "scylla.schedule": schedule,
        },
    ):
        yield
