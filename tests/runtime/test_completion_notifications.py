"""Completion notifications: `notify=` on submit (and per handler), delivered by a task on the
queue `scylla.notify` that POSTs the outcome, signed, to a real HTTP server; retried after a
failure; refused input writes nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from scylla_django import handler
from scylla_django.deliveries import delivery_rn, submit_deliveries
from scylla_django.enums import Status
from scylla_django.exceptions import Abort
from scylla_django.handlers import HandlerRegistry
from scylla_django.models import Task, Worker
from scylla_django.monitor import Monitor
from scylla_django.notify import NOTIFY_QUEUE, SIGNATURE_HEADER, post, register_notify, verify
from scylla_django.retries import Fixed, Retry
from tests.processes import finish, start

SECRET = "a-test-secret-of-some-length"
ALLOW = {"NOTIFY_SECRET": SECRET, "NOTIFY_ALLOW_HTTP": True, "NOTIFY_BACKOFF": 0}

pytestmark = pytest.mark.django_db(transaction=True)


class Receiver:
    """An HTTP server on 127.0.0.1 in a thread: answers each POST with the next status of
    `answers` (then 200) and keeps what it received."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = list(answers)
        self.received: list[tuple[bytes, dict[str, str]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((body, dict(self.headers)))
                self.send_response(receiver.answers.pop(0) if receiver.answers else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver([500])
    yield server
    server.close()


def complete(task: Task, worker: Worker, result: Any = None) -> None:
    [leased] = Task.objects.filter(pk=task.pk).lease(worker, [task.queue], limit=1)
    leased.complete(worker.name, result=result)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://example.com/hook", "invalid_notify"),
        ("ftp://example.com/hook", "invalid_notify"),
        ("https://", "invalid_notify"),
        ("https://exa mple.com/", "invalid_notify"),
        ("https://example.com/\x00", "invalid_notify"),
        ("https://example.com/" + "a" * 2000, "invalid_notify"),
        (7, "invalid_notify"),
    ],
)
def test_a_bad_notify_url_is_refused_and_nothing_is_written(url, code):
    with override_settings(SCYLLA={"NOTIFY_SECRET": SECRET}):
        with pytest.raises(ValidationError) as caught:
            Task.objects.submit("emails", {}, notify=url)
        assert caught.value.error_dict["notify"][0].code == code
        outcomes = Task.objects.submit_many([{"queue": "emails", "spec": {}, "notify": url}])
    assert outcomes[0].outcome == "invalid"
    assert not Task.objects.exists()


def test_notify_needs_a_secret_and_http_needs_the_setting():
    with pytest.raises(ValidationError) as caught:
        Task.objects.submit("emails", {}, notify="https://example.com/hook")
    assert caught.value.error_dict["notify"][0].code == "notify_not_configured"
    with override_settings(SCYLLA=ALLOW):
        task = Task.objects.submit("emails", {}, notify="http://127.0.0.1:9/hook")
    assert task.notify == "http://127.0.0.1:9/hook"
    assert Task.objects.count() == 1


def test_a_delivery_is_never_notified_itself():
    with override_settings(SCYLLA=ALLOW), pytest.raises(ValidationError) as caught:
        Task.objects.submit(NOTIFY_QUEUE, {}, notify="https://example.com/hook")
    assert caught.value.error_dict["notify"][0].code == "invalid_notify"


def test_the_api_refuses_a_bad_url_with_a_400_and_takes_a_good_one():
    user = User.objects.create_superuser("admin", "a@b.c", "pw")
    client = APIClient()
    client.force_authenticate(user)
    with override_settings(SCYLLA={"NOTIFY_SECRET": SECRET}):
        answer = client.post(
            "/api/scylla/tasks/",
            {"queue": "emails", "spec": {}, "notify": "http://example.com/"},
            format="json",
        )
        assert answer.status_code == 400, answer.json()
        assert answer.json()["errors"]["notify"][0]["code"] == "invalid_notify"
        assert not Task.objects.exists()
        bulk = client.post(
            "/api/scylla/bulk/tasks/",
            [
                {"queue": "emails", "spec": {}, "notify": "http://example.com/"},
                {"queue": "emails", "spec": {}, "rn": "ok", "notify": "https://example.com/h"},
            ],
            format="json",
        )
        assert [o["outcome"] for o in bulk.json()] == ["invalid", "inserted"]
        answer = client.post(
            "/api/scylla/tasks/",
            {"queue": "emails", "spec": {}, "rn": "one", "notify": "https://example.com/h"},
            format="json",
        )
    assert answer.status_code == 201
    assert answer.json()["notify"] == "https://example.com/h"
    assert answer.json()["notified"] is None
    assert Task.objects.get(rn="ok").notify == "https://example.com/h"
    assert Task.objects.get(rn="one").notify == "https://example.com/h"


def test_a_handler_gives_its_queues_a_notify_url():
    registry = HandlerRegistry()

    @handler("n-default", registry=registry, notify="https://example.com/default")
    def run(ctx: Any) -> None:
        return None

    try:
        with override_settings(SCYLLA={"NOTIFY_SECRET": SECRET}):
            assert Task.objects.submit("n-default", {}).notify == "https://example.com/default"
            own = Task.objects.submit("n-default", {}, notify="https://example.com/own")
            assert own.notify == "https://example.com/own"
    finally:
        register_notify("n-default", None)
    with pytest.raises(TypeError):
        handler("n-default", registry=registry, notify=3)  # type: ignore[arg-type]


# -- deliveries submitted once, on every way a task ends ---------------------------------------


@override_settings(SCYLLA=ALLOW)
def test_each_final_task_gets_one_delivery_linked_to_it(worker):
    url = "http://127.0.0.1:9/hook"
    done = Task.objects.submit("emails", {}, rn="done", notify=url)
    cancelled = Task.objects.submit("emails", {}, rn="cancelled", notify=url)
    waiting = Task.objects.submit("emails", {}, rn="waiting", notify=url)
    Task.objects.submit("emails", {}, rn="quiet")
    complete(done, worker, {"n": 1})
    cancelled.cancel()
    assert Monitor().run_once().notifications == 2  # the monitor's service
    assert submit_deliveries() == 0  # once
    deliveries = Task.objects.filter(queue=NOTIFY_QUEUE).order_by("pk")
    assert [(d.rn, d.parent, d.spec) for d in deliveries] == [
        (delivery_rn(done.pk), "done", {"task": "done", "url": url}),
        (delivery_rn(cancelled.pk), "cancelled", {"task": "cancelled", "url": url}),
    ]
    assert all(d.status == Status.READY and d.not_before is None for d in deliveries)
    assert Task.objects.get(rn="done").notified is not None
    assert Task.objects.get(rn="waiting").notified is None
    assert Task.objects.filter(parent="done").count() == 1  # listed as the task's child
    waiting.refresh_from_db()
    assert waiting.status == Status.READY


@override_settings(SCYLLA=ALLOW)
def test_a_retried_task_is_notified_once_when_its_chain_ends(worker):
    task = Task.objects.submit(
        "emails", {}, rn="chain", notify="http://127.0.0.1:9/hook", retry=Retry(2, Fixed(0))
    )
    [leased] = Task.objects.filter(pk=task.pk).lease(worker, ["emails"], limit=1)
    leased.abort(worker.name, [{"code": "boom", "args": {}, "description": ""}], retry=True)
    assert submit_deliveries() == 0  # a retry follows: not final
    retry = Task.objects.get(retry_of="chain")
    assert retry.notify == "http://127.0.0.1:9/hook"
    [leased] = Task.objects.filter(pk=retry.pk).lease(worker, ["emails"], limit=1)
    leased.abort(worker.name, [{"code": "boom", "args": {}, "description": ""}])
    assert submit_deliveries() == 1
    [delivery] = Task.objects.filter(queue=NOTIFY_QUEUE)
    assert delivery.spec["task"] == retry.rn


# -- a real delivery, from a real worker process ------------------------------------------------


def test_a_worker_posts_the_signed_outcome_and_retries_after_a_500(receiver, worker):
    with override_settings(SCYLLA=ALLOW):
        task = Task.objects.submit("t-echo", {"x": 1}, rn="paid", notify=receiver.url)
    complete(task, worker, {"paid": True})
    with override_settings(SCYLLA=ALLOW):
        assert submit_deliveries() == 1
    process = start(
        "scylla_worker",
        f"--queue={NOTIFY_QUEUE}",
        "--poll-interval=0.1",
        "--max-tasks=2",
        env={"SCYLLA_TEST_SETTINGS": json.dumps(ALLOW)},
    )
    code, output = finish(process, timeout=40)
    assert code == 0, output
    assert len(receiver.received) == 2  # a 500, then a 200
    for body, headers in receiver.received:
        assert verify(body, headers[SIGNATURE_HEADER], SECRET)
        assert not verify(body + b" ", headers[SIGNATURE_HEADER], SECRET)
        assert headers["X-Scylla-Delivery"] == delivery_rn(task.pk)
    sent = json.loads(receiver.received[-1][0])
    assert sent["rn"] == sent["root"] == "paid"
    assert sent["status"] == "completed"
    assert sent["result"] == {"paid": True}
    assert sent["queue"] == "t-echo" and sent["attempt"] == 1 and sent["dead"] is False
    assert sent["created"] and sent["finished"]
    first, second = Task.objects.filter(queue=NOTIFY_QUEUE).order_by("attempt")
    assert first.status == Status.ABORTED
    assert first.errors[0]["code"] == "notify_failed"
    assert first.errors[0]["args"]["status"] == 500
    assert second.retry_of == first.rn and second.status == Status.COMPLETED
    assert second.result == {"status": 200}
    task.refresh_from_db()
    assert task.status == Status.COMPLETED and task.result == {"paid": True}  # untouched


def test_a_failed_delivery_never_touches_the_task(worker):
    """A receiver that is down: each POST fails, the chain gives up, the task stays as it
    ended."""
    settings = {**ALLOW, "NOTIFY_ATTEMPTS": 2}
    with override_settings(SCYLLA=settings):
        task = Task.objects.submit("emails", {}, rn="lost", notify="http://127.0.0.1:9/x")
        task.cancel()
        assert submit_deliveries() == 1
        from scylla_django.deliveries import deliver

        for attempt in (1, 2):
            [delivery] = Task.objects.filter(queue=NOTIFY_QUEUE, status=Status.READY).lease(
                worker, [NOTIFY_QUEUE], limit=1
            )
            with pytest.raises(Abort) as caught:
                deliver(delivery)
            assert caught.value.code == "notify_failed"
            delivery.abort(worker.name, [caught.value.as_error()])
            assert delivery.attempt == attempt
    assert not Task.objects.filter(queue=NOTIFY_QUEUE, status=Status.READY).exists()
    assert Task.objects.filter(queue=NOTIFY_QUEUE, dead__isnull=False).count() == 1
    task.refresh_from_db()
    assert task.status == Status.CANCELLED and task.errors == []


@override_settings(SCYLLA=ALLOW)
def test_the_task_page_shows_its_notify_url_and_its_delivery(admin_client, worker):
    task = Task.objects.submit("emails", {}, rn="shown", notify="http://127.0.0.1:9/page")
    task.cancel()
    submit_deliveries()
    page = admin_client.get(reverse("admin:scylla_django_task_change", args=[task.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "http://127.0.0.1:9/page" in html
    assert delivery_rn(task.pk) in html  # among its children, linked


def test_a_redirect_or_no_answer_is_a_failed_post():
    server = Receiver([302])
    try:
        with override_settings(SCYLLA=ALLOW):
            answer = post(server.url, b"{}", "d1")
            assert (answer.status, answer.ok) == (302, False)  # not followed
            assert len(server.received) == 1
            refused = post("http://127.0.0.1:9/none", b"{}", "d2")
    finally:
        server.close()
    assert refused.status is None and not refused.ok and refused.error
