"""OpenTelemetry traces, recorded by the SDK's in-memory exporter: a web request's trace (its
`traceparent` header, or a span around the submission) through a task, its retry and a
child, with the right parents and links; the lease, heartbeat and finish events of a worker's
run; the trace id in the API and the admin; and nothing recorded without a tracer provider."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from scylla_django import retries, spec_versions, tracing
from scylla_django.enums import Status
from scylla_django.handlers import HandlerRegistry, TaskContext, handler
from scylla_django.models import Schedule, Task, TaskTrace
from scylla_django.retries import Fixed, Retry
from scylla_django.schedules import clean_definition, next_tick, tick
from scylla_django.testing import drain, run_task
from scylla_django.worker import TaskWorker, WorkerOptions
from tests.helpers import CLIENT_PERMISSIONS, client_for, make_user

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"


def forget_tracer_provider() -> None:
    """Undo `trace.set_tracer_provider` (which the API allows once per process), as
    OpenTelemetry's own test utilities do."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans recorded by the SDK, in memory, for this test only."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    forget_tracer_provider()
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    forget_tracer_provider()


@pytest.fixture
def orders() -> Iterator[HandlerRegistry]:
    """`trace.orders` fails on its first attempt (retried at once), then spawns a
    `trace.mail` child."""
    registry = HandlerRegistry()

    @handler("trace.orders", registry=registry, retry=Retry(max_attempts=2, backoff=Fixed(1)))
    def order(ctx: TaskContext) -> str:
        if ctx.task.attempt == 1:
            raise ConnectionError("the payment service is down")
        return ctx.spawn("trace.mail", {"to": ctx.spec["customer"]})

    @handler("trace.mail", registry=registry)
    def mail(ctx: TaskContext) -> None:
        with trace.get_tracer("tests").start_as_current_span("smtp send"):
            pass

    yield registry
    retries.register_policy("trace.orders", None)


def process_spans(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """The `process` spans recorded, by the rn of their task."""
    return {
        str(span.attributes["messaging.message.id"]): span
        for span in exporter.get_finished_spans()
        if span.name.startswith("process ")
    }


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def events(span: ReadableSpan) -> list[tuple[str, dict]]:
    return [(event.name, dict(event.attributes or {})) for event in span.events]


def test_a_web_request_traced_through_a_task_its_retry_and_a_child(spans, orders):
    api = client_for(make_user("client", *CLIENT_PERMISSIONS))
    answer = api.post(
        "/api/scylla/tasks/",
        {"queue": "trace.orders", "spec": {"customer": "ada@example.com"}},
        format="json",
        HTTP_TRACEPARENT=TRACEPARENT,
    )
    assert answer.status_code == 201, answer.content
    first = answer.json()["rn"]

    failed = run_task(first, registry=orders)
    assert failed.status == Status.ABORTED
    retry = Task.objects.get(retry_of=first)
    done = run_task(retry.rn, registry=orders)
    assert done.status == Status.COMPLETED
    child = run_task(done.result, registry=orders)
    assert child.status == Status.COMPLETED

    by_rn = process_spans(spans)
    assert set(by_rn) == {first, retry.rn, child.rn}
    run1, run2, run3 = by_rn[first], by_rn[retry.rn], by_rn[child.rn]

    # The first run is a child of the request's span, in its trace, and failed.
    assert run1.parent is not None and run1.parent.is_remote
    assert f"{run1.parent.span_id:016x}" == SPAN_ID
    assert hex_ids(run1)[0] == TRACE_ID
    assert run1.links == ()
    assert run1.kind == trace.SpanKind.CONSUMER
    assert run1.status.status_code == trace.StatusCode.ERROR
    assert run1.attributes["messaging.operation.type"] == "process"
    assert run1.attributes["messaging.destination.name"] == "trace.orders"
    assert run1.attributes["scylla.attempt"] == 1
    assert [name for name, _ in events(run1)] == ["lease", "finish"]
    assert events(run1)[1][1]["scylla.outcome"] == "aborted"

    # The retry starts a trace of its own, linked to the request's span.
    assert run2.parent is None
    assert hex_ids(run2)[0] != TRACE_ID
    [link] = run2.links
    assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (TRACE_ID, SPAN_ID)
    assert run2.attributes["scylla.attempt"] == 2
    assert events(run2)[-1][1]["scylla.outcome"] == "completed"

    # The child it spawned is a child of the retry's run, and the handler's own span of it.
    assert run3.parent is not None
    assert (run3.parent.trace_id, run3.parent.span_id) == (
        run2.context.trace_id,
        run2.context.span_id,
    )
    assert run3.links == ()
    [smtp] = [s for s in spans.get_finished_spans() if s.name == "smtp send"]
    assert smtp.parent is not None and smtp.parent.span_id == run3.context.span_id

    # What is stored: the request's traceparent for the task and its retry, the retry's run
    # for the child; the API and the admin show the trace id.
    stored = dict(TaskTrace.objects.values_list("rn", "traceparent"))
    assert stored[first] == stored[retry.rn] == TRACEPARENT
    assert stored[child.rn].split("-")[1:3] == list(hex_ids(run2))
    detail = api.get(f"/api/scylla/tasks/{retry.rn}/").json()
    assert (detail["trace_id"], detail["traceparent"]) == (TRACE_ID, TRACEPARENT)


def test_a_span_around_a_submission_is_the_parent_of_its_run(spans, orders):
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("POST /orders") as request_span:
        bulk = Task.objects.submit_many(
            [{"queue": "trace.mail", "spec": {"to": "a"}}, {"queue": "trace.mail", "spec": {}}]
        )
    single_rn = None
    with tracer.start_as_current_span("POST /mail") as other_span:
        single_rn = Task.objects.submit("trace.mail", {"to": "b"}).rn

    for outcome in bulk:
        run_task(outcome.rn, registry=orders)
    run_task(single_rn, registry=orders)

    by_rn = process_spans(spans)
    for outcome in bulk:
        assert by_rn[outcome.rn].parent.span_id == request_span.get_span_context().span_id
    assert by_rn[single_rn].parent.span_id == other_span.get_span_context().span_id


def test_a_workers_run_records_its_heartbeats(spans):
    registry = HandlerRegistry()
    beating = threading.Event()

    @handler("trace.slow", registry=registry)
    def slow(ctx: TaskContext) -> None:
        ctx.set_progress(0.5)
        assert beating.wait(30), "no heartbeat came"

    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("submit"):
        task = Task.objects.submit("trace.slow", {})
    worker = TaskWorker(
        WorkerOptions(["trace.slow"], registry=registry, heartbeat_interval=0.05, max_tasks=1)
    )
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert worker.hooks.wait_for("beat", 2)
    finally:
        beating.set()
        thread.join(60)
    assert not thread.is_alive()

    [run] = process_spans(spans).values()
    names = [name for name, _ in events(run)]
    assert names[0] == "lease" and names[-1] == "finish"
    assert "heartbeat" in names
    assert Task.objects.get(rn=task.rn).status == Status.COMPLETED


def test_without_a_tracer_provider_nothing_is_recorded_and_no_trace_is_read(orders):
    forget_tracer_provider()
    assert not tracing.enabled()
    task = Task.objects.submit("trace.mail", {"to": "a"})
    assert not TaskTrace.objects.exists()
    with tracing.incoming(TRACEPARENT):
        traced = Task.objects.submit("trace.mail", {"to": "b"})
    with tracing.incoming("not a traceparent"):
        ignored = Task.objects.submit("trace.mail", {"to": "c"})
    assert dict(TaskTrace.objects.values_list("rn", "traceparent")) == {traced.rn: TRACEPARENT}
    with CaptureQueriesContext(connection) as queries:
        assert run_task(traced.rn, registry=orders).status == Status.COMPLETED
    assert queries.captured_queries
    assert not [q for q in queries.captured_queries if TaskTrace._meta.db_table in q["sql"]]
    assert run_task(task.rn, registry=orders).status == Status.COMPLETED
    assert run_task(ignored.rn, registry=orders).status == Status.COMPLETED


def test_a_bad_traceparent_given_to_submit_is_refused():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        Task.objects.submit("trace.mail", {}, traceparent="00-" + "0" * 32 + "-" + SPAN_ID + "-01")
    assert refused.value.error_dict["traceparent"][0].code == "invalid_traceparent"
    assert not Task.objects.exists()


def test_a_schedules_tick_is_sent_in_a_span_its_run_is_a_child_of(spans, orders):
    start = datetime(2026, 6, 1, tzinfo=UTC)
    definition = clean_definition("digest", {"every": "1h", "queue": "trace.mail", "spec": {}})
    Schedule.objects.create(
        name="digest", next_run=next_tick(definition, start), **definition.fields()
    )
    spec_versions.register_spec("trace.mail", 4, None)
    try:
        [fired] = tick(now=start + timedelta(hours=1))
    finally:
        spec_versions.unregister("trace.mail")
    task = Task.objects.get(rn=fired.rn)
    assert task.version == 4

    [send] = [s for s in spans.get_finished_spans() if s.name == "send trace.mail"]
    assert send.kind == trace.SpanKind.PRODUCER
    assert send.attributes["scylla.schedule"] == "digest"
    Task.objects.filter(pk=task.pk).update(version=None)
    run_task(task.rn, registry=orders)
    run = process_spans(spans)[task.rn]
    assert run.parent is not None and run.parent.span_id == send.context.span_id
    assert run.context.trace_id == send.context.trace_id


PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "tracing.md"
BLOCK = re.compile(r"```python\n(# tracing example:.*?)```", re.DOTALL)


def test_the_tracing_page_example_runs_as_written():
    match = BLOCK.search(PAGE.read_text())
    assert match is not None, "docs/howto/tracing.md has no tracing example block"
    forget_tracer_provider()
    try:
        exec(compile(match.group(1), str(PAGE), "exec"), {})
    finally:
        trace.get_tracer_provider().shutdown()  # type: ignore[attr-defined]
        forget_tracer_provider()
    [task] = Task.objects.filter(queue="thumbnails")
    assert (task.status, task.result) == (Status.COMPLETED, {"size": 128})
    assert TaskTrace.objects.filter(rn=task.rn).exists()


def test_the_bulk_and_batch_routes_store_the_requests_traceparent():
    api = client_for(make_user("client", *CLIENT_PERMISSIONS))
    bulk = api.post(
        "/api/scylla/bulk/tasks/",
        [{"queue": "trace.mail", "spec": {}}, {"queue": "trace.mail", "spec": {}}],
        format="json",
        HTTP_TRACEPARENT=TRACEPARENT,
    )
    assert bulk.status_code == 200, bulk.content
    batch = api.post(
        "/api/scylla/batches/",
        {"tasks": [{"queue": "trace.mail", "spec": {}}]},
        format="json",
        HTTP_TRACEPARENT=TRACEPARENT,
    )
    assert batch.status_code == 201, batch.content
    untraced = api.post("/api/scylla/tasks/", {"queue": "trace.mail", "spec": {}}, format="json")
    stored = dict(TaskTrace.objects.values_list("rn", "traceparent"))
    assert sorted(stored.values()) == [TRACEPARENT] * 3
    assert untraced.json()["rn"] not in stored
    assert {item["rn"] for item in bulk.json()} <= set(stored)


def test_a_bundle_handlers_run_links_to_each_members_submission(spans):
    registry = HandlerRegistry()

    @handler("trace.batch", registry=registry, bundle_size=5)
    def together(contexts: list[TaskContext]) -> None:
        return None

    tracer = trace.get_tracer("tests")
    submitted = []
    for name in ("POST /a", "POST /b"):
        with tracer.start_as_current_span(name) as span:
            Task.objects.submit("trace.batch", {})
            submitted.append(span.get_span_context().span_id)

    drain(["trace.batch"], registry=registry)

    [run] = [s for s in spans.get_finished_spans() if s.name == "process trace.batch"]
    assert run.parent is None
    assert sorted(link.context.span_id for link in run.links) == sorted(submitted)
    assert run.attributes["messaging.batch.message_count"] == 2
    assert [event.name for event in run.events] == ["lease", "finish"]


def test_the_task_admin_page_shows_the_trace_id_and_the_version(admin_client):
    with tracing.incoming(TRACEPARENT):
        task = Task.objects.submit("trace.mail", {})
    Task.objects.filter(pk=task.pk).update(version=3)
    page = admin_client.get(reverse("admin:scylla_django_task_change", args=[task.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert f'<span title="{TRACEPARENT}">{TRACE_ID}</span>' in html
    assert re.search(r"Version:</label>\s*<div class=\"readonly\">3</div>", html), html
