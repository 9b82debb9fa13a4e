"""Why a ready task waits, as `Task.waiting_reasons()` reads it and as the API's task detail,
the admin's task page and `scylla_tasks show` print it: a queue limit that is full, a queue no
live worker serves, and the parents a follow-up still waits for, each named."""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse

from scylla_django.enums import Liveness
from scylla_django.models import QueueSetting, Task, Worker
from tests.factories import WorkerFactory
from tests.helpers import API, CLIENT_PERMISSIONS, client_for, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    return client_for(make_user("client", *CLIENT_PERMISSIONS))


def reasons(task: Task) -> list[dict[str, object]]:
    return Task.objects.get(pk=task.pk).waiting_reasons()


def surfaces(task: Task, api, admin_client) -> tuple[list[str], str, str]:
    """The reasons' details over the API, the admin's task page, and `scylla_tasks show`."""
    over_http = [r["detail"] for r in api.get(f"{API}/tasks/{task.rn}/").json()["waiting"]]
    page = admin_client.get(reverse("admin:scylla_django_task_change", args=[task.pk]))
    listed = re.search(r'<ul class="scylla-waiting">(.*?)</ul>', page.content.decode(), re.S)
    out = io.StringIO()
    call_command("scylla_tasks", "show", task.rn, stdout=out)
    return over_http, listed[1] if listed else "", out.getvalue()


def lease(worker: Worker, queue: str) -> list[Task]:
    return Task.objects.lease(worker, [queue], limit=10, lease_length=timedelta(seconds=30))


def test_a_task_held_by_a_full_queue_limit_says_so(api, admin_client):
    worker = WorkerFactory(queues=["reports"])
    QueueSetting.objects.limit("reports", 1)
    Task.objects.submit("reports", {"n": 1}, rn="first")
    held = Task.objects.submit("reports", {"n": 2}, rn="second")
    assert [t.rn for t in lease(worker, "reports")] == ["first"]
    assert lease(worker, "reports") == []
    [reason] = reasons(held)
    assert (reason["code"], reason["running"], reason["max_running"]) == ("queue_full", 1, 1)
    detail = "queue reports full 1/1 (its limit)"
    over_http, page, shown = surfaces(held, api, admin_client)
    assert over_http == [detail]
    assert detail in page and detail in shown
    QueueSetting.objects.limit("reports", 2)
    assert reasons(held) == []


def test_a_task_on_a_queue_no_live_worker_serves_says_so(api, admin_client):
    held = Task.objects.submit("emials", {"to": "ada"}, rn="typo")
    WorkerFactory(queues=["emails"])
    [reason] = reasons(held)
    detail = "no live worker serves queue emials"
    assert (reason["code"], reason["detail"]) == ("unserved", detail)
    over_http, page, shown = surfaces(held, api, admin_client)
    assert over_http == [detail]
    assert detail in page and detail in shown
    # A stopped worker of the queue serves it no more than none; a live one does.
    gone = WorkerFactory(queues=["emials"])
    gone.stop()
    assert Worker.objects.in_state(Liveness.STOPPED).filter(pk=gone.pk).exists()
    assert [r["code"] for r in reasons(held)] == ["unserved"]
    WorkerFactory(queues=["emials"])
    assert reasons(held) == []


def test_a_follow_up_names_the_parents_it_still_waits_for(api, admin_client):
    WorkerFactory(queues=["etl"])
    for rn in ("extract", "transform", "gone"):
        Task.objects.submit("etl", {}, rn=rn)
    child = Task.objects.submit("etl", {}, rn="load", after=["extract", "transform", "gone"])
    [extract] = [t for t in lease(WorkerFactory(queues=["etl"]), "etl") if t.rn == "extract"]
    extract.complete(extract.owner, {"rows": 3})
    Task.objects.filter(rn="gone").delete()  # purged while the child waits
    [reason] = reasons(child)
    assert reason["code"] == "parents"
    assert reason["parents"] == [
        {"rn": "transform", "status": "running"},
        {"rn": "gone", "status": "purged"},
    ]
    assert reason["pending"] == 2
    detail = "waits for its parents to complete: transform (running), gone (purged)"
    assert reason["detail"] == detail
    over_http, page, shown = surfaces(child, api, admin_client)
    assert over_http == [detail]
    assert detail in page and detail in shown


def test_a_parents_reason_names_ten_and_counts_the_rest(monkeypatch):
    WorkerFactory(queues=["etl"])
    parents = [Task.objects.submit("etl", {}, rn=f"p{n:02}").rn for n in range(12)]
    child = Task.objects.submit("etl", {}, after=parents)
    [reason] = reasons(child)
    assert [p["rn"] for p in reason["parents"]] == parents[:10]
    assert reason["pending"] == 12
    assert reason["detail"].endswith("p09 (ready) and 2 more")
