"""The API's operations routes: workers with their liveness, stopping an HTTP worker, "reset
lease now", and the error-code filter."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from scylla_django.enums import EventType, Status
from scylla_django.handlers import HandlerRegistry
from scylla_django.models import Task, Worker
from scylla_django.worker import WorkerOptions
from tests.factories import running_task
from tests.helpers import (
    API,
    assert_error,
    assert_field_error,
    client_for,
    make_user,
    post,
    typs,
    worker_of,
)

pytestmark = pytest.mark.django_db


def silence(worker: Worker, *, dead: bool = False) -> None:
    past = Now() - timedelta(seconds=1)
    Worker.objects.filter(pk=worker.pk).update(
        silent_at=past, **({"dead_at": past} if dead else {})
    )


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [w["name"] for w in response.json()["results"]]


def test_list_workers_with_their_state_newest_first(api):
    alive = Worker.objects.register(["emails"], heartbeat_interval=2, lease_length=9)
    silent = Worker.objects.register(["emails", "reports"])
    dead = Worker.objects.register(["reports"])
    stopped = Worker.objects.register(["emails"])
    silence(silent)
    silence(dead, dead=True)
    stopped.stop()
    response = api.get(f"{API}/workers/")
    assert names(response) == [stopped.name, dead.name, silent.name, alive.name]
    by_name = {w["name"]: w for w in response.json()["results"]}
    assert {n: w["state"] for n, w in by_name.items()} == {
        alive.name: "alive",
        silent.name: "silent",
        dead.name: "dead",
        stopped.name: "stopped",
    }
    assert by_name[alive.name]["heartbeat_interval"] == 2.0
    assert by_name[alive.name]["lease_length"] == 9.0
    assert by_name[alive.name]["silent_at"] and by_name[alive.name]["dead_at"]

    assert names(api.get(f"{API}/workers/?state=silent&state=dead")) == [dead.name, silent.name]
    assert names(api.get(f"{API}/workers/?queue=reports")) == [dead.name, silent.name]
    assert names(api.get(f"{API}/workers/?queue=emails&state=alive")) == [alive.name]
    assert names(api.get(f"{API}/workers/?queue=email")) == []


@pytest.mark.parametrize(
    ("query", "field"),
    [("state=sleeping", "state"), ("queue=-bad", "queue"), ("queue=", "queue")],
)
def test_list_workers_refuses_bad_filters(api, query, field):
    response = api.get(f"{API}/workers/?{query}")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]


def test_list_workers_pages(api):
    workers = [Worker.objects.register(["q"]) for _ in range(3)]
    first = api.get(f"{API}/workers/?page_size=2").json()
    assert [w["name"] for w in first["results"]] == [workers[2].name, workers[1].name]
    second = api.get(first["next"]).json()
    assert [w["name"] for w in second["results"]] == [workers[0].name]


def test_workers_need_the_view_permission():
    assert_error(client_for(None).get(f"{API}/workers/"), 401, "not_authenticated")
    nobody = client_for(make_user("nobody"))
    assert_error(nobody.get(f"{API}/workers/"), 403, "permission_denied")
    worker = Worker.objects.register(["q"])
    assert_error(nobody.get(f"{API}/workers/{worker.name}/"), 403, "permission_denied")


def test_worker_detail_lists_the_tasks_it_holds(api, worker, other_worker):
    held = [running_task(worker), running_task(worker)]
    running_task(other_worker)
    done = running_task(worker)
    done.complete(worker)
    response = api.get(f"{API}/workers/{worker.name}/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["name"] == worker.name and body["state"] == "alive"
    assert [t["rn"] for t in body["tasks"]] == [t.rn for t in held]
    assert {t["status"] for t in body["tasks"]} == {"running"}


@pytest.mark.parametrize("name", ["worker-999999", "worker-x", "monitor-1", "%00"])
def test_worker_detail_of_an_unknown_worker_is_404(api, name):
    assert_error(api.get(f"{API}/workers/{name}/"), 404, "worker_not_found")


def test_an_http_worker_stops_itself(worker_user):
    client = client_for(worker_user)
    mine = worker_of(worker_user)
    response = post(client, f"/workers/{mine.name}/stop/")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "stopped"
    first = Worker.objects.get(pk=mine.pk).stopped
    assert first is not None
    assert post(client, f"/workers/{mine.name}/stop/").status_code == 200
    assert Worker.objects.get(pk=mine.pk).stopped == first


def test_stop_is_refused_for_another_user_s_worker_and_without_permission(worker_user, api):
    theirs = worker_of(make_user("other", "work_task"))
    assert_error(
        post(client_for(worker_user), f"/workers/{theirs.name}/stop/"), 403, "not_your_worker"
    )
    assert_error(post(api, f"/workers/{theirs.name}/stop/"), 403, "permission_denied")
    assert_error(post(client_for(worker_user), "/workers/worker-0/stop/"), 404, "worker_not_found")
    assert_field_error(
        post(client_for(worker_user), f"/workers/{theirs.name}/stop/", {"x": 1}),
        "x",
        "unknown_field",
    )
    assert Worker.objects.get(pk=theirs.pk).stopped is None


def test_register_takes_the_intervals(worker_user):
    client = client_for(worker_user)
    body = {"queues": ["q"], "lease_length": 60, "heartbeat_interval": 5}
    response = post(client, "/workers/", body)
    assert response.status_code == 201, response.content
    worker = Worker.objects.get_by_name(response.json()["name"])
    assert (worker.lease_length, worker.heartbeat_interval) == (
        timedelta(seconds=60),
        timedelta(seconds=5),
    )
    assert_field_error(
        post(client, "/workers/", {"queues": ["q"], "heartbeat_interval": 0}),
        "heartbeat_interval",
        "invalid_heartbeat_interval",
    )


def test_an_http_worker_heartbeats_a_quarter_of_its_lease_by_default(worker_user, settings):
    """The rule of every worker: three heartbeats fit in a lease with room to spare."""
    registry = HandlerRegistry()
    registry.register("q", lambda ctx: None)
    client = client_for(worker_user)
    body = post(client, "/workers/", {"queues": ["q"], "lease_length": 60}).json()
    assert body["heartbeat_interval"] == 15.0
    in_process = WorkerOptions(["q"], lease_length=timedelta(seconds=60), registry=registry)
    assert body["heartbeat_interval"] == in_process.heartbeat_seconds
    settings.SCYLLA = {"LEASE_LENGTH": "20s"}
    body = post(client, "/workers/", {"queues": ["q"]}).json()
    assert (body["lease_length"], body["heartbeat_interval"]) == (20.0, 5.0)
    worker = Worker.objects.get_by_name(body["name"])
    assert worker.heartbeat_interval == timedelta(seconds=5)
    assert 3 * worker.heartbeat_interval < worker.lease_length


def test_register_takes_the_intervals_as_text(worker_user):
    client = client_for(worker_user)
    response = post(
        client, "/workers/", {"queues": ["q"], "lease_length": "2m", "heartbeat_interval": "10s"}
    )
    assert response.status_code == 201, response.content
    worker = Worker.objects.get_by_name(response.json()["name"])
    assert (worker.lease_length, worker.heartbeat_interval) == (
        timedelta(minutes=2),
        timedelta(seconds=10),
    )


# -- reset lease now --------------------------------------------------------------------------


def test_reset_lease_of_a_silent_worker_s_task(api, worker):
    task = running_task(worker)
    silence(worker)
    response = post(api, f"/tasks/{task.rn}/reset/", {"owner": worker.name, "lease": 1})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["owner"], body["progress"]) == ("ready", None, 0.0)
    assert typs(task) == [EventType.ASSIGNMENT, EventType.TIMEOUT]


def test_reset_lease_conflicts(api, worker):
    task = running_task(worker)
    body = {"owner": worker.name, "lease": 1}
    assert_error(post(api, f"/tasks/{task.rn}/reset/", body), 409, "owner_alive")
    silence(worker)
    stale = {"owner": worker.name, "lease": 2}
    assert_error(post(api, f"/tasks/{task.rn}/reset/", stale), 409, "lease_lost")
    assert post(api, f"/tasks/{task.rn}/reset/", body).status_code == 200
    assert_error(post(api, f"/tasks/{task.rn}/reset/", body), 409, "invalid_transition")
    assert_error(post(api, "/tasks/nope/reset/", body), 404, "task_not_found")
    assert typs(task) == [EventType.ASSIGNMENT, EventType.TIMEOUT]


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"lease": 1}, "owner", "required"),
        ({"owner": "worker-1"}, "lease", "required"),
        ({"owner": "worker-1", "lease": 0}, "lease", "min_value"),
        ({"owner": "worker-1", "lease": "1"}, "lease", "invalid"),
        ({"owner": "worker-1", "lease": 1, "force": True}, "force", "unknown_field"),
    ],
)
def test_reset_lease_refuses_bad_input(api, worker, body, field, code):
    task = running_task(worker)
    assert_field_error(post(api, f"/tasks/{task.rn}/reset/", body), field, code)
    assert Task.objects.get(pk=task.pk).status == Status.RUNNING


def test_reset_lease_needs_the_cancel_permission(worker):
    task = running_task(worker)
    silence(worker)
    viewer = client_for(make_user("viewer", "view_task", "work_task"))
    body = {"owner": worker.name, "lease": 1}
    assert_error(post(viewer, f"/tasks/{task.rn}/reset/", body), 403, "permission_denied")
    assert Task.objects.get(pk=task.pk).status == Status.RUNNING


# -- error codes ------------------------------------------------------------------------------


def test_the_task_list_filters_by_error_code(api, worker):
    tasks = [running_task(worker) for _ in range(3)]
    tasks[0].abort(worker, [{"code": "timeout", "args": {}, "description": ""}])
    tasks[1].abort(worker, [{"code": "empty", "args": {}, "description": ""}])
    response = api.get(f"{API}/tasks/?error_code=timeout")
    assert response.status_code == 200, response.content
    assert [t["rn"] for t in response.json()["results"]] == [tasks[0].rn]
    response = api.get(f"{API}/tasks/?error_code=empty&status=aborted")
    assert [t["rn"] for t in response.json()["results"]] == [tasks[1].rn]
    assert api.get(f"{API}/tasks/?error_code=%00").status_code == 400
    assert api.get(f"{API}/tasks/?error_code=").status_code == 400
