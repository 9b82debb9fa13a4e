"""`POST /tasks/{rn}/pause/`, `POST /tasks/{rn}/resume/` and `DELETE /tasks/{rn}/`: an
operator's control of one task that has not started, permission-checked, with the errors'
codes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scylla_django.enums import Status
from scylla_django.models import Task, TaskDeletion, TaskPause
from tests.helpers import API, assert_error, client_for, make_user, post, reload

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(db):
    return client_for(make_user("operator", "view_task", "control_queue", "delete_task"))


@pytest.fixture
def viewer(db):
    return client_for(make_user("viewer", "view_task", "submit_task", "cancel_task"))


def lease(worker) -> list[Task]:
    return Task.objects.lease(worker, ["default"], limit=10, lease_length=timedelta(seconds=60))


def test_pause_and_resume_over_http(operator, worker):
    task = Task.objects.submit("default", {})
    response = post(operator, f"/tasks/{task.rn}/pause/", {})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ready"
    [paused] = [r for r in body["waiting"] if r["code"] == "paused"]
    assert paused["by"] == "operator"
    assert lease(worker) == []
    assert_error(post(operator, f"/tasks/{task.rn}/pause/", {}), 409, "task_paused")
    response = post(operator, f"/tasks/{task.rn}/resume/", {})
    assert response.status_code == 200, response.content
    assert "paused" not in [r["code"] for r in response.json()["waiting"]]
    assert_error(post(operator, f"/tasks/{task.rn}/resume/", {}), 409, "not_paused")
    assert [t.rn for t in lease(worker)] == [task.rn]
    assert_error(post(operator, f"/tasks/{task.rn}/pause/", {}), 409, "invalid_transition")
    assert_error(post(operator, "/tasks/nope/pause/", {}), 404, "task_not_found")


def test_a_paused_task_shows_its_own_not_before(operator):
    """Not the far-off date that holds it: the one its resume gives back."""
    plain = Task.objects.submit("default", {}, rn="plain")
    start = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)
    later = Task.objects.submit("default", {}, rn="later", not_before=start)
    for task in (plain, later):
        post(operator, f"/tasks/{task.rn}/pause/", {})
    assert operator.get(f"{API}/tasks/plain/").json()["not_before"] is None
    shown = operator.get(f"{API}/tasks/later/").json()["not_before"]
    assert shown is not None and datetime.fromisoformat(shown.replace("Z", "+00:00")) == start
    listed = {t["rn"]: t["not_before"] for t in operator.get(f"{API}/tasks/").json()["results"]}
    assert listed == {"plain": None, "later": shown}


def test_delete_over_http_keeps_a_record(operator, worker):
    task = Task.objects.submit("default", {"n": 1})
    response = operator.delete(f"{API}/tasks/{task.rn}/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["rn"], body["queue"], body["spec"], body["by"]) == (
        task.rn,
        "default",
        {"n": 1},
        "operator",
    )
    assert [e["_typ"] for e in body["history"]] == ["TaskDeletion"]
    assert not Task.objects.filter(rn=task.rn).exists()
    assert TaskDeletion.objects.filter(rn=task.rn).count() == 1
    assert_error(operator.delete(f"{API}/tasks/{task.rn}/"), 404, "task_not_found")


def test_a_started_task_is_a_409_with_its_code(operator, worker):
    task = Task.objects.submit("default", {})
    lease(worker)
    assert_error(operator.delete(f"{API}/tasks/{task.rn}/"), 409, "task_started")
    assert reload(task).status == Status.RUNNING
    assert not TaskDeletion.objects.exists()


def test_each_needs_its_permission(viewer):
    task = Task.objects.submit("default", {})
    assert_error(post(viewer, f"/tasks/{task.rn}/pause/", {}), 403, "permission_denied")
    task.pause()
    assert_error(post(viewer, f"/tasks/{task.rn}/resume/", {}), 403, "permission_denied")
    assert_error(viewer.delete(f"{API}/tasks/{task.rn}/"), 403, "permission_denied")
    assert_error(client_for(None).delete(f"{API}/tasks/{task.rn}/"), 401, "not_authenticated")
    assert reload(task).is_paused and TaskPause.objects.count() == 1
