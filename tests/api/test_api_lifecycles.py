"""Task lifecycles over the API: an HTTP worker snoozes its task, a submission expires, and a
task's detail names its parent and children (`?parent=` lists them)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scylla_django.enums import EventType, Status
from scylla_django.models import Outcome, Task, Worker
from tests.factories import TaskFactory, running_task
from tests.helpers import (
    API,
    Stopwatch,
    assert_error,
    assert_field_error,
    client_for,
    expire,
    post,
    reload,
    typs,
    worker_of,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_worker(worker_user) -> APIClient:
    return client_for(worker_user)


@pytest.fixture
def mine(worker_user) -> Worker:
    return worker_of(worker_user)


def test_snooze_puts_the_task_back_to_ready_later(as_worker, mine):
    task = running_task(mine, rn="t1")
    response = post(
        as_worker, "/tasks/t1/snooze/", {"worker": mine.name, "lease": 1, "delay": "5m"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["owner"], body["snoozes"], body["leases"]) == (
        "ready",
        None,
        1,
        1,
    )
    stored = reload(task)
    assert stored.not_before - stored.updated == timedelta(minutes=5)
    assert typs(task) == [EventType.ASSIGNMENT, EventType.SNOOZE]


def test_snooze_of_a_lease_not_held_is_409_and_writes_nothing(as_worker, mine, other_worker):
    task = running_task(mine, rn="t1")
    expire(task)
    Task.objects.reset_expired()
    Task.objects.lease(other_worker, ["default"])
    response = post(as_worker, "/tasks/t1/snooze/", {"worker": mine.name, "lease": 1, "delay": 5})
    assert_error(response, 409, "lease_lost")
    stored = reload(task)
    assert (stored.status, stored.owner, stored.snoozes) == (
        Status.RUNNING,
        other_worker.name,
        0,
    )


@pytest.mark.parametrize(
    "delay, code",
    [
        (0, "invalid_delay"),
        (-1, "invalid_delay"),
        ("soon", "invalid_delay"),
        (True, "invalid_delay"),
        ("0s", "invalid_delay"),
        (None, "null"),
    ],
)
def test_snooze_refuses_a_delay_that_is_not_a_positive_duration(as_worker, mine, delay, code):
    task = running_task(mine, rn="t1")
    response = post(
        as_worker, "/tasks/t1/snooze/", {"worker": mine.name, "lease": 1, "delay": delay}
    )
    assert_field_error(response, "delay", code)
    assert reload(task).status == Status.RUNNING


def test_snooze_past_max_snoozes_aborts_the_task(as_worker, mine, settings):
    settings.SCYLLA = {"MAX_SNOOZES": 0}
    task = running_task(mine, rn="t1")
    response = post(as_worker, "/tasks/t1/snooze/", {"worker": mine.name, "lease": 1, "delay": 5})
    assert response.status_code == 200
    assert response.json()["status"] == "aborted"
    assert reload(task).errors[0]["code"] == "too_many_snoozes"


def test_submit_with_expires_in_and_expires_at(api):
    clock = Stopwatch()
    response = post(api, "/tasks/", {"queue": "q", "spec": 1, "expires_in": "1h"})
    assert response.status_code == 201, response.content
    body = response.json()
    task = Task.objects.get(rn=body["rn"])
    # An hour from the moment it was submitted: between the stopwatch's start and now.
    assert clock.bounds((task.expires_at - clock.started).total_seconds(), 3600)
    at = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    response = post(api, "/tasks/", {"queue": "q", "spec": 1, "expires_at": at.isoformat()})
    assert response.status_code == 201, response.content
    assert Task.objects.get(rn=response.json()["rn"]).expires_at == at


def test_bulk_submit_takes_an_expiry_per_item(api):
    at = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    items = [
        {"rn": "b-1", "queue": "q", "spec": 1, "expires_at": at.isoformat()},
        {"rn": "b-2", "queue": "q", "spec": 2, "expires_in": 60},
        {"rn": "b-3", "queue": "q", "spec": 3, "expires_at": "2001-01-01T00:00:00Z"},
        {"rn": "b-4", "queue": "q", "spec": 4},
    ]
    response = post(api, "/bulk/tasks/", items)
    assert response.status_code == 200, response.content
    outcomes = [o["outcome"] for o in response.json()]
    assert outcomes == ["inserted", "inserted", "invalid", "inserted"]
    assert Task.objects.get(rn="b-1").expires_at == at
    assert Task.objects.get(rn="b-2").expires_at > timezone.now()
    assert Task.objects.get(rn="b-4").expires_at is None
    assert not Task.objects.filter(rn="b-3").exists()


@pytest.mark.parametrize(
    "extra, field, code",
    [
        ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at", "invalid_expires_at"),
        ({"expires_at": "tomorrow"}, "expires_at", "invalid"),
        ({"expires_in": -5}, "expires_in", "invalid_expires_in"),
        ({"expires_in": "forever"}, "expires_in", "invalid_expires_in"),
    ],
)
def test_submit_refuses_a_bad_expiry_and_writes_nothing(api, extra, field, code):
    response = post(api, "/tasks/", {"queue": "q", "spec": 1, **extra})
    assert response.status_code == 400, response.content
    assert code in [e["code"] for e in response.json()["errors"][field]], response.json()
    assert not Task.objects.exists()


def test_a_task_detail_names_its_parent_and_children(api, worker):
    parent = running_task(worker, rn="parent")
    children = tuple(
        {"queue": "q", "spec": n, "rn": f"child-{n}", "parent": "parent"} for n in range(3)
    )
    Task.objects.finish_many(worker, [Outcome(parent.pk, 1, result=1, children=children)])
    TaskFactory(rn="unrelated")
    body = api.get(f"{API}/tasks/parent/").json()
    assert body["children"] == ["child-0", "child-1", "child-2"] and body["parent"] is None
    child = api.get(f"{API}/tasks/child-1/").json()
    assert (child["parent"], child["children"]) == ("parent", [])
    listed = api.get(f"{API}/tasks/", {"parent": "parent"}).json()["results"]
    assert sorted(t["rn"] for t in listed) == ["child-0", "child-1", "child-2"]
    assert_field_error(api.get(f"{API}/tasks/", {"parent": "a/b"}), "parent", "invalid_rn")


# -- children from an HTTP worker's completion --------------------------------------------------


def test_an_http_worker_completes_its_task_with_children(as_worker, mine):
    task = running_task(mine, rn="t1")
    body = {
        "worker": mine.name,
        "lease": 1,
        "result": {"ok": True},
        "children": [
            {"queue": "emails", "spec": {"n": 1}, "rn": "c1", "priority": 9},
            {"queue": "emails", "spec": {"n": 2}, "not_before": "2099-01-01T00:00:00Z"},
        ],
    }
    response = post(as_worker, "/tasks/t1/complete/", body)
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["status"] == "completed" and len(answer["children"]) == 2
    assert answer["children"][0] == "c1"
    children = Task.objects.filter(parent="t1").order_by("pk")
    assert list(children.values_list("rn", flat=True)) == answer["children"]
    first, second = children
    assert (first.queue, first.spec, first.priority, first.status) == (
        "emails",
        {"n": 1},
        9,
        Status.READY,
    )
    assert second.not_before.year == 2099
    assert reload(task).status == Status.COMPLETED
    assert sorted(reload(task).children_rns()) == sorted(answer["children"])


def test_children_of_a_refused_completion_are_never_submitted(as_worker, mine, other_worker):
    task = running_task(mine, rn="t1")
    expire(task)
    Task.objects.reset_expired()
    Task.objects.lease(other_worker, ["default"])  # the lease passed on
    body = {"worker": mine.name, "lease": 1, "children": [{"queue": "emails", "spec": {}}]}
    assert_error(post(as_worker, "/tasks/t1/complete/", body), 409, "lease_lost")
    assert not Task.objects.filter(parent="t1").exists()
    assert reload(task).status == Status.RUNNING


@pytest.mark.parametrize(
    "children, field, code",
    [
        ([{"queue": "bad queue", "spec": {}}], "children.0.queue", "invalid_queue"),
        ([{"queue": "emails"}], "children.0.spec", "required"),
        ([{"queue": "emails", "spec": {}, "after": ["x"]}], "children.0.after", "unknown_field"),
        ([{"queue": "emails", "spec": {}, "priority": 300}], "children.0.priority", "max_value"),
        ("no", "children.non_field_errors", "not_a_list"),
    ],
)
def test_a_bad_child_is_a_400_and_nothing_is_written(as_worker, mine, children, field, code):
    task = running_task(mine, rn="t1")
    body = {"worker": mine.name, "lease": 1, "children": children}
    response = post(as_worker, "/tasks/t1/complete/", body)
    assert response.status_code == 400, response.content
    assert_field_error(response, field, code)
    assert reload(task).status == Status.RUNNING
    assert Task.objects.count() == 1


def test_a_child_refused_by_the_model_is_a_400_with_its_code(as_worker, mine, settings):
    task = running_task(mine, rn="t1")
    settings.SCYLLA = {"NOTIFY_SECRET": "s" * 20}
    body = {
        "worker": mine.name,
        "lease": 1,
        "children": [{"queue": "emails", "spec": {}, "notify": "http://example.com/"}],
    }
    assert_field_error(post(as_worker, "/tasks/t1/complete/", body), "children", "invalid_notify")
    assert reload(task).status == Status.RUNNING
    assert Task.objects.count() == 1
