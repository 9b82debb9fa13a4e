"""The REST API, route by route: each success, and each error code it can answer.

Helpers shared by the other API test modules live here too.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml
from django.db.models.functions import Now
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Outcome, Task, Worker
from tests.factories import TaskFactory, running_task
from tests.helpers import (
    API,
    TASK_FIELDS,
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
    """A worker process's client: may register, lease and finish."""
    return client_for(worker_user)


@pytest.fixture
def mine(worker_user) -> Worker:
    """The worker that `as_worker` registered."""
    return worker_of(worker_user)


def test_submit_creates_a_ready_task(api):
    response = post(api, "/tasks/", {"queue": "emails", "spec": {"to": "a@b.c"}, "priority": 50})
    assert response.status_code == 201
    body = response.json()
    assert set(body) == TASK_FIELDS
    task = Task.objects.get(rn=body["rn"])
    assert (task.queue, task.spec, task.priority, task.status) == (
        "emails",
        {"to": "a@b.c"},
        50,
        Status.READY,
    )
    assert body["status"] == "ready" and body["leases"] == 0 and body["errors"] == []
    assert body["owner"] is None and body["deadline"] is None and body["result"] is None


def test_submit_takes_an_rn_and_a_delayed_start(api):
    response = post(
        api,
        "/tasks/",
        {"rn": "order-233", "queue": "q", "spec": 1, "not_before": "2999-01-01T10:00:00+02:00"},
    )
    assert response.status_code == 201
    assert response.json()["not_before"] == "2999-01-01T08:00:00Z"
    assert Task.objects.get(rn="order-233").not_before.year == 2999


def test_resubmitting_an_rn_is_409_and_changes_nothing(api):
    post(api, "/tasks/", {"rn": "once", "queue": "q", "spec": {"v": 1}})
    assert_error(
        post(api, "/tasks/", {"rn": "once", "queue": "r", "spec": 2}), 409, "duplicate_task"
    )
    assert list(Task.objects.values_list("queue", "spec")) == [("q", {"v": 1})]


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"spec": 1}, "queue", "required"),
        ({"queue": "q"}, "spec", "required"),
        ({"queue": "-q", "spec": 1}, "queue", "invalid_queue"),
        ({"queue": "q" * 101, "spec": 1}, "queue", "max_length"),
        ({"queue": "q", "spec": None}, "spec", "null"),
        ({"queue": "q", "spec": 1, "rn": "a b"}, "rn", "invalid_rn"),
        ({"queue": "q", "spec": 1, "priority": 256}, "priority", "max_value"),
        ({"queue": "q", "spec": 1, "priority": -1}, "priority", "min_value"),
        ({"queue": "q", "spec": 1, "not_before": "soon"}, "not_before", "invalid"),
        ({"queue": "q", "spec": 1, "status": "completed"}, "status", "unknown_field"),
    ],
)
def test_submit_refuses_invalid_input_per_field(api, body, field, code):
    assert_field_error(post(api, "/tasks/", body), field, code)
    assert not Task.objects.exists()


def test_every_invalid_field_is_reported_at_once(api):
    body = assert_error(
        post(api, "/tasks/", {"queue": 5, "spec": None, "priority": "1"}), 400, "invalid"
    )
    assert set(body["errors"]) == {"queue", "spec", "priority"}
    assert body["detail"].endswith("(and 2 more)")


def test_a_spec_over_the_size_limit_is_400_too_large(api, settings):
    settings.SCYLLA = {"SPEC_SIZE_LIMIT": 100}
    assert_field_error(post(api, "/tasks/", {"queue": "q", "spec": "x" * 200}), "spec", "too_large")
    assert not Task.objects.exists()


@pytest.mark.parametrize("path", ["/tasks/", "/bulk/tasks/"])
def test_a_body_over_django_s_upload_limit_is_413(api, settings, path):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = {"queue": "q", "spec": "x" * 2000}
    assert_error(post(api, path, body if path == "/tasks/" else [body]), 413, "too_large")
    assert not Task.objects.exists()


def test_a_body_that_is_not_json_is_415(api):
    response = api.post(
        f"{API}/tasks/", "queue=q", content_type="application/x-www-form-urlencoded"
    )
    assert_error(response, 415, "unsupported_media_type")


def test_a_body_that_is_not_an_object_is_400(api):
    assert_field_error(post(api, "/tasks/", [1, 2]), "non_field_errors", "invalid")


# -- bulk ---------------------------------------------------------------------------------------


def test_bulk_submit_reports_an_outcome_per_item(api):
    TaskFactory(rn="taken")
    items = [
        {"rn": "a", "queue": "q", "spec": 1},
        {"rn": "taken", "queue": "q", "spec": 2},
        {"rn": "a", "queue": "q", "spec": 3},
        {"rn": "b", "queue": "-bad", "spec": 4, "owner": "worker-1"},
        "not an object",
        {"queue": "q", "spec": {"n": 6}, "priority": 9},
    ]
    response = post(api, "/bulk/tasks/", items)
    assert response.status_code == 200
    outcomes = response.json()
    assert [(o["index"], o["rn"], o["outcome"]) for o in outcomes[:5]] == [
        (0, "a", "inserted"),
        (1, "taken", "duplicate"),
        (2, "a", "duplicate"),
        (3, "b", "invalid"),
        (4, None, "invalid"),
    ]
    assert outcomes[5]["outcome"] == "inserted" and len(outcomes[5]["rn"]) == 36
    assert {e["code"] for e in outcomes[3]["errors"]["queue"]} == {"invalid_queue"}
    assert outcomes[3]["errors"]["owner"][0]["code"] == "unknown_field"
    assert outcomes[4]["errors"]["non_field_errors"][0]["code"] == "invalid"
    assert all(o["errors"] == {} for o in outcomes if o["outcome"] != "invalid")
    assert Task.objects.get(rn="a").spec == 1
    assert Task.objects.get(rn=outcomes[5]["rn"]).priority == 9
    assert Task.objects.count() == 3


@pytest.mark.parametrize(
    "body", [[], {"queue": "q", "spec": 1}, [{"queue": "q", "spec": 1}] * 1001]
)
def test_bulk_takes_a_list_of_1_to_1000(api, body):
    assert_field_error(post(api, "/bulk/tasks/", body), "non_field_errors", "invalid_bulk")
    assert not Task.objects.exists()


@pytest.mark.parametrize("rn", ["bulk", "cancel"])
def test_tasks_called_bulk_or_cancel_are_tasks_like_any_other(api, rn):
    assert_error(api.get(f"{API}/tasks/{rn}/"), 404, "task_not_found")
    assert_error(post(api, f"/tasks/{rn}/"), 405, "method_not_allowed")
    TaskFactory(rn=rn)
    assert api.get(f"{API}/tasks/{rn}/").json()["rn"] == rn
    assert post(api, f"/tasks/{rn}/cancel/", {}).json()["status"] == Status.CANCELLED


def test_the_bulk_routes_take_only_post(api):
    assert_error(api.get(f"{API}/bulk/tasks/"), 405, "method_not_allowed")
    assert_error(api.get(f"{API}/bulk/tasks/cancel/"), 405, "method_not_allowed")


# -- read ---------------------------------------------------------------------------------------


def test_detail_has_the_task_and_its_history_in_the_seed_s_shape(api, worker):
    task = running_task(worker, rn="t1")
    task.heartbeat(worker, progress=0.5)
    task.yield_lease(worker)
    response = api.get(f"{API}/tasks/t1/")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == TASK_FIELDS | {
        "submitter",
        "parents",
        "children",
        "waiting",
        "history",
        "traceparent",
        "trace_id",
    }
    assert body["parents"] == [] and body["waiting"] == []
    assert body["submitter"]["kind"] == "system"
    assert body["status"] == "running" and body["owner"] == worker.name
    assert body["progress"] == 0.5
    rows = History.objects.filter(task=task).order_by("id")
    assert body["history"] == [
        {"_typ": h.typ, "worker": h.worker, "progress": h.progress, "time": h.as_json()["time"]}
        for h in rows
    ]
    assert [entry["_typ"] for entry in body["history"]] == ["TaskAssignment", "TaskYield"]
    assert body["history"][1]["progress"] == 0.5


@pytest.mark.parametrize("rn", ["nope", "not an rn", "x" * 129])
def test_an_unknown_rn_is_404(api, rn):
    assert_error(api.get(f"{API}/tasks/{rn}/"), 404, "task_not_found")


def test_list_is_a_cursor_page_without_history(api):
    TaskFactory.create_batch(3)
    response = api.get(f"{API}/tasks/")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"next", "previous", "results"}
    assert body["next"] is None and body["previous"] is None
    assert len(body["results"]) == 3 and set(body["results"][0]) == TASK_FIELDS


def test_queues_counts_tasks_by_status_and_ages_the_oldest_ready_one(api, worker):
    old = TaskFactory(queue="default")
    clock = Stopwatch()
    Task.objects.filter(pk=old.pk).update(created=Now() - timedelta(minutes=5))
    TaskFactory(queue="default")
    running_task(worker, queue="other").complete(worker)
    response = api.get(f"{API}/queues/")
    assert response.status_code == 200
    by_queue = {entry["queue"]: entry for entry in response.json()}
    assert by_queue["default"]["counts"] == {
        "ready": 2,
        "scheduled": 0,
        "running": 0,
        "completed": 0,
        "aborted": 0,
        "cancelled": 0,
    }
    assert by_queue["other"]["counts"]["completed"] == 1
    assert (
        by_queue["other"]["oldest_ready"] is None and by_queue["other"]["oldest_ready_age"] is None
    )
    assert clock.bounds(by_queue["default"]["oldest_ready_age"], 300)
    assert (
        by_queue["default"]["oldest_ready"] == api.get(f"{API}/tasks/{old.rn}/").json()["created"]
    )


def test_queues_counts_delayed_tasks_as_scheduled_and_ages_leasable_ones_only(api):
    from scylla_django.admin import dashboard

    delayed = TaskFactory(queue="default")
    Task.objects.filter(pk=delayed.pk).update(
        created=Now() - timedelta(hours=2), not_before=Now() + timedelta(hours=1)
    )
    due = TaskFactory(queue="default")  # waiting since its not_before, a minute ago
    clock = Stopwatch()
    Task.objects.filter(pk=due.pk).update(
        created=Now() - timedelta(hours=1), not_before=Now() - timedelta(minutes=1)
    )
    only_delayed = TaskFactory(queue="later")
    Task.objects.filter(pk=only_delayed.pk).update(not_before=Now() + timedelta(hours=1))
    by_queue = {entry["queue"]: entry for entry in api.get(f"{API}/queues/").json()}
    assert (by_queue["default"]["counts"]["ready"], by_queue["default"]["counts"]["scheduled"]) == (
        1,
        1,
    )
    assert clock.bounds(by_queue["default"]["oldest_ready_age"], 60)
    assert by_queue["later"]["counts"]["ready"] == 0
    assert by_queue["later"]["counts"]["scheduled"] == 1
    assert (
        by_queue["later"]["oldest_ready"] is None and by_queue["later"]["oldest_ready_age"] is None
    )
    # The admin dashboard says the same.
    rows = {row.queue: row for row in dashboard.queue_table()}
    for queue, entry in by_queue.items():
        assert rows[queue].counts == entry["counts"]
        oldest = entry["oldest_ready"]
        assert rows[queue].waiting_since == (oldest and parse_datetime(oldest))
    assert rows["default"].waiting_since == reload(due).not_before


def test_queues_is_empty_without_tasks(api):
    assert api.get(f"{API}/queues/").json() == []


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_a_ready_task(api):
    TaskFactory(rn="t1")
    response = post(api, "/tasks/t1/cancel/")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert reload(Task.objects.get(rn="t1")).status == Status.CANCELLED


def test_cancel_a_running_task_and_its_worker_learns_on_heartbeat(api, as_worker, mine):
    task = running_task(mine, rn="t1")
    assert post(api, "/tasks/t1/cancel/").json()["status"] == "cancelled"
    assert typs(task) == [EventType.ASSIGNMENT, EventType.CANCELLATION]
    response = post(as_worker, "/tasks/t1/heartbeat/", {"worker": mine.name, "lease": 1})
    assert_error(response, 409, "task_cancelled")


@pytest.mark.parametrize("finish", ["complete", "cancel"])
def test_cancel_a_terminal_task_is_409(api, worker, finish):
    task = running_task(worker, rn="t1")
    task.complete(worker) if finish == "complete" else task.cancel()
    assert_error(post(api, "/tasks/t1/cancel/"), 409, "invalid_transition")
    assert reload(task).status == (Status.COMPLETED if finish == "complete" else Status.CANCELLED)


def test_cancel_an_unknown_task_is_404(api):
    assert_error(post(api, "/tasks/nope/cancel/"), 404, "task_not_found")


def test_cancel_takes_no_parameters(api):
    TaskFactory(rn="t1")
    assert_field_error(
        post(api, "/tasks/t1/cancel/", {"status": "ready"}), "status", "unknown_field"
    )
    assert reload(Task.objects.get(rn="t1")).status == Status.READY


# -- workers ------------------------------------------------------------------------------------


def test_register_names_the_worker_and_binds_it_to_the_user(as_worker, worker_user):
    response = post(as_worker, "/workers/", {"queues": ["emails"], "capacity": 4, "pid": 42})
    assert response.status_code == 201
    body = response.json()
    worker = Worker.objects.get_by_name(body["name"])
    assert body["name"] == f"worker-{worker.pk}"
    assert body["queues"] == ["emails"] and body["capacity"] == 4 and body["pid"] == 42
    assert body["stopped"] is None and body["started"] and body["last_seen"]
    assert worker.user_id == worker_user.pk


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({}, "queues", "required"),
        ({"queues": []}, "queues", "min_length"),
        ({"queues": "emails"}, "queues", "not_a_list"),
        ({"queues": ["-x"]}, "queues.0", "invalid_queue"),
        ({"queues": ["q"], "capacity": 0}, "capacity", "min_value"),
        ({"queues": ["q"], "name": "worker-1"}, "name", "unknown_field"),
        ({"queues": ["q"], "user": 1}, "user", "unknown_field"),
    ],
)
def test_register_refuses_invalid_input(as_worker, body, field, code):
    assert_field_error(post(as_worker, "/workers/", body), field, code)
    assert not Worker.objects.exists()


def test_lease_hands_out_running_tasks_highest_priority_first(as_worker, mine):
    TaskFactory(rn="low", priority=1)
    TaskFactory(rn="high", priority=9)
    TaskFactory(rn="elsewhere", queue="other", priority=255)
    response = post(as_worker, f"/workers/{mine.name}/lease/", {"limit": 5, "lease_length": 60})
    assert response.status_code == 200
    tasks = response.json()["tasks"]
    assert [t["rn"] for t in tasks] == ["high", "low"]
    assert all(t["status"] == "running" and t["owner"] == mine.name for t in tasks)
    assert all(t["leases"] == 1 and set(t) == TASK_FIELDS for t in tasks)
    leased = Task.objects.get(rn="high")
    assert timedelta(seconds=55) < leased.deadline - leased.updated <= timedelta(seconds=60)


def test_lease_uses_the_given_queues_and_limit(as_worker, mine):
    TaskFactory.create_batch(3, queue="other")
    body = {"queues": ["other"], "limit": 2}
    assert len(post(as_worker, f"/workers/{mine.name}/lease/", body).json()["tasks"]) == 2


def test_lease_with_nothing_ready_is_an_empty_list(as_worker, mine):
    assert post(as_worker, f"/workers/{mine.name}/lease/").json() == {"tasks": []}


def test_lease_records_that_the_worker_is_alive(as_worker, mine):
    Worker.objects.filter(pk=mine.pk).update(last_seen=Now() - timedelta(hours=1))
    post(as_worker, f"/workers/{mine.name}/lease/")
    assert Worker.objects.alive(timedelta(minutes=1)).filter(pk=mine.pk).exists()


@pytest.mark.parametrize("name", ["worker-999999", "bob", "worker-x"])
def test_lease_as_an_unknown_worker_is_404(as_worker, name):
    assert_error(post(as_worker, f"/workers/{name}/lease/"), 404, "worker_not_found")


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"limit": 0}, "limit", "min_value"),
        ({"limit": 101}, "limit", "max_value"),
        ({"limit": "2"}, "limit", "invalid"),
        ({"lease_length": 0}, "lease_length", "invalid_lease_length"),
        ({"lease_length": 0.5}, "lease_length", "invalid_lease_length"),
        ({"lease_length": "500ms"}, "lease_length", "invalid_lease_length"),
        ({"lease_length": True}, "lease_length", "invalid_lease_length"),
        ({"queues": []}, "queues", "min_length"),
        ({"worker": "worker-2"}, "worker", "unknown_field"),
    ],
)
def test_lease_refuses_invalid_input(as_worker, mine, body, field, code):
    TaskFactory()
    assert_field_error(post(as_worker, f"/workers/{mine.name}/lease/", body), field, code)
    assert not Task.objects.filter(status=Status.RUNNING).exists()


# -- worker operations --------------------------------------------------------------------------


def test_heartbeat_extends_the_lease_and_records_progress(as_worker, mine):
    task = running_task(mine, rn="t1", lease_length=5)
    response = post(
        as_worker,
        "/tasks/t1/heartbeat/",
        {"worker": mine.name, "lease": 1, "progress": 0.5, "lease_length": 120},
    )
    assert response.status_code == 200
    assert response.json()["progress"] == 0.5
    task = reload(task)
    assert task.progress == 0.5
    assert timedelta(seconds=115) < task.deadline - task.updated <= timedelta(seconds=120)


def test_heartbeat_and_lease_take_the_lease_length_as_text(as_worker, mine):
    task = running_task(mine, rn="t1", lease_length=5)
    body = {"worker": mine.name, "lease": 1, "lease_length": "3m"}
    assert post(as_worker, "/tasks/t1/heartbeat/", body).status_code == 200
    task = reload(task)
    assert timedelta(seconds=175) < task.deadline - task.updated <= timedelta(seconds=180)
    TaskFactory(rn="next")
    response = post(as_worker, f"/workers/{mine.name}/lease/", {"lease_length": "2h"})
    assert [t["rn"] for t in response.json()["tasks"]] == ["next"]
    leased = Task.objects.get(rn="next")
    assert timedelta(minutes=119) < leased.deadline - leased.updated <= timedelta(hours=2)


def test_heartbeat_after_the_lease_was_reset_is_409_lease_lost(as_worker, mine):
    task = running_task(mine, rn="t1")
    expire(task)
    Task.objects.reset_expired()
    assert_error(
        post(as_worker, "/tasks/t1/heartbeat/", {"worker": mine.name, "lease": 1}),
        409,
        "lease_lost",
    )
    assert reload(task).status == Status.READY


def test_complete_records_the_result(as_worker, mine):
    task = running_task(mine, rn="t1")
    response = post(
        as_worker, "/tasks/t1/complete/", {"worker": mine.name, "lease": 1, "result": {"sent": 1}}
    )
    assert response.status_code == 200
    assert response.json()["status"] == "completed"
    task = reload(task)
    assert (task.status, task.progress, task.result) == (Status.COMPLETED, 1.0, {"sent": 1})
    assert typs(task) == [EventType.ASSIGNMENT, EventType.COMPLETION]


def test_completing_twice_is_409_invalid_transition(as_worker, mine):
    running_task(mine, rn="t1")
    post(as_worker, "/tasks/t1/complete/", {"worker": mine.name, "lease": 1})
    response = post(
        as_worker, "/tasks/t1/complete/", {"worker": mine.name, "lease": 1, "result": 2}
    )
    assert_error(response, 409, "invalid_transition")
    assert Task.objects.get(rn="t1").result is None


def test_completing_a_cancelled_task_is_409_task_cancelled(as_worker, mine):
    running_task(mine, rn="t1").cancel()
    assert_error(
        post(as_worker, "/tasks/t1/complete/", {"worker": mine.name, "lease": 1}),
        409,
        "task_cancelled",
    )
    assert Task.objects.get(rn="t1").status == Status.CANCELLED


def test_abort_records_the_errors(as_worker, mine):
    task = running_task(mine, rn="t1")
    errors = [{"code": "empty", "args": {"day": 3}, "description": "no rows"}, {"code": "again"}]
    response = post(
        as_worker, "/tasks/t1/abort/", {"worker": mine.name, "lease": 1, "errors": errors}
    )
    assert response.status_code == 200
    assert response.json()["errors"] == [
        errors[0],
        {"code": "again", "args": {}, "description": ""},
    ]
    assert reload(task).status == Status.ABORTED
    assert typs(task) == [EventType.ASSIGNMENT, EventType.ABORT]


@pytest.mark.parametrize(
    ("errors", "field", "code"),
    [
        ([], "errors", "min_length"),
        ({"code": "x"}, "errors", "not_a_list"),
        ([{"code": " "}], "errors.0.code", "blank"),
        ([{"code": "x", "trace": "..."}], "errors.0.trace", "unknown_field"),
        ([{"description": "no code"}], "errors.0.code", "required"),
    ],
)
def test_abort_refuses_invalid_errors(as_worker, mine, errors, field, code):
    task = running_task(mine, rn="t1")
    response = post(
        as_worker, "/tasks/t1/abort/", {"worker": mine.name, "lease": 1, "errors": errors}
    )
    assert_field_error(response, field, code)
    assert reload(task).status == Status.RUNNING


def test_yield_gives_the_task_back_for_the_monitor(as_worker, mine):
    task = running_task(mine, rn="t1")
    response = post(as_worker, "/tasks/t1/yield/", {"worker": mine.name, "lease": 1})
    assert response.status_code == 200
    assert response.json()["status"] == "running"
    assert typs(task) == [EventType.ASSIGNMENT, EventType.YIELD]
    assert Task.objects.reset_expired() == 1
    assert typs(task) == [EventType.ASSIGNMENT, EventType.YIELD]
    assert reload(task).status == Status.READY


def body_for(operation: str, worker: Worker) -> dict[str, object]:
    """A valid body for a worker operation as `worker`."""
    return {
        "worker": worker.name,
        "lease": 1,
        **({"errors": [{"code": "x"}]} if operation == "abort" else {}),
    }


@pytest.mark.parametrize("operation", ["heartbeat", "complete", "abort", "yield"])
@pytest.mark.parametrize(
    ("state", "code"),
    [
        ("cancelled", "task_cancelled"),
        ("completed", "invalid_transition"),
        ("aborted", "invalid_transition"),
        ("reset", "lease_lost"),
        ("another worker's", "lease_lost"),
    ],
)
def test_worker_operations_on_a_task_not_held_are_409(as_worker, mine, operation, state, code):
    task = running_task(mine, rn="t1")
    if state == "cancelled":
        task.cancel()
    elif state in {"completed", "aborted"}:
        task.complete(mine) if state == "completed" else task.abort(mine, {"code": "x"})
    else:
        expire(task)
        Task.objects.reset_expired()
        if state == "another worker's":
            Task.objects.lease(Worker.objects.register(queues=["default"]), ["default"])
    before = reload(task)
    assert_error(post(as_worker, f"/tasks/t1/{operation}/", body_for(operation, mine)), 409, code)
    after = reload(task)
    assert (after.status, after.owner, after.updated) == (
        before.status,
        before.owner,
        before.updated,
    )


def test_a_result_over_the_size_limit_is_400_too_large(as_worker, mine, settings):
    task = running_task(mine, rn="t1")
    settings.SCYLLA = {"SPEC_SIZE_LIMIT": 100}
    body = {"worker": mine.name, "lease": 1, "result": "x" * 200}
    assert_field_error(post(as_worker, "/tasks/t1/complete/", body), "result", "too_large")
    assert reload(task).status == Status.RUNNING


@pytest.mark.parametrize("operation", ["heartbeat", "complete", "abort", "yield"])
def test_worker_operations_on_an_unknown_task_are_404(as_worker, mine, operation):
    body = body_for(operation, mine)
    assert_error(post(as_worker, f"/tasks/nope/{operation}/", body), 404, "task_not_found")


@pytest.mark.parametrize("operation", ["heartbeat", "complete", "abort", "yield"])
def test_worker_operations_as_an_unknown_worker_are_404(as_worker, mine, operation):
    task = running_task(mine, rn="t1")
    body = {**body_for(operation, mine), "worker": "worker-999999"}
    assert_error(post(as_worker, f"/tasks/t1/{operation}/", body), 404, "worker_not_found")
    assert reload(task).status == Status.RUNNING


@pytest.mark.parametrize("operation", ["heartbeat", "complete", "abort", "yield"])
def test_worker_operations_need_the_worker(as_worker, mine, operation):
    running_task(mine, rn="t1")
    assert_field_error(post(as_worker, f"/tasks/t1/{operation}/", {}), "worker", "required")


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"progress": 1.5}, "progress", "max_value"),
        ({"progress": "0.5"}, "progress", "invalid"),
        ({"progress": True}, "progress", "invalid"),
        ({"lease_length": -1}, "lease_length", "invalid_lease_length"),
        ({"lease_length": "-5s"}, "lease_length", "invalid_lease_length"),
        ({"status": "completed"}, "status", "unknown_field"),
        ({"deadline": "2999-01-01T00:00:00Z"}, "deadline", "unknown_field"),
    ],
)
def test_heartbeat_refuses_invalid_input(as_worker, mine, body, field, code):
    task = running_task(mine, rn="t1")
    before = reload(task)
    response = post(as_worker, "/tasks/t1/heartbeat/", {"worker": mine.name, "lease": 1, **body})
    assert_field_error(response, field, code)
    after = reload(task)
    assert (after.status, after.progress, after.deadline) == (
        before.status,
        before.progress,
        before.deadline,
    )


# -- protocol -----------------------------------------------------------------------------------


def test_the_schema_is_openapi_3_with_every_route(api):
    response = api.get(f"{API}/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == {
        f"{API}/tasks/",
        f"{API}/bulk/tasks/",
        f"{API}/bulk/tasks/cancel/",
        f"{API}/tasks/{{rn}}/",
        f"{API}/tasks/{{rn}}/log/",
        f"{API}/tasks/{{rn}}/eta/",
        f"{API}/tasks/{{rn}}/cancel/",
        f"{API}/tasks/{{rn}}/heartbeat/",
        f"{API}/tasks/{{rn}}/complete/",
        f"{API}/tasks/{{rn}}/abort/",
        f"{API}/tasks/{{rn}}/yield/",
        f"{API}/tasks/{{rn}}/snooze/",
        f"{API}/tasks/{{rn}}/retry/",
        f"{API}/tasks/{{rn}}/reset/",
        f"{API}/tasks/{{rn}}/discard/",
        f"{API}/batches/",
        f"{API}/batches/{{id}}/",
        f"{API}/batches/{{id}}/results/",
        f"{API}/batches/{{id}}/cancel/",
        f"{API}/schedules/",
        f"{API}/schedules/{{name}}/",
        f"{API}/schedules/{{name}}/run/",
        f"{API}/schedules/{{name}}/why/",
        f"{API}/schedules/{{name}}/calendar/",
        f"{API}/events/",
        f"{API}/workers/",
        f"{API}/workers/{{name}}/",
        f"{API}/workers/{{name}}/lease/",
        f"{API}/workers/{{name}}/stop/",
        f"{API}/queues/",
        f"{API}/queues/{{name}}/pause/",
        f"{API}/queues/{{name}}/limit/",
        f"{API}/queues/{{name}}/cap/",
        f"{API}/tasks/{{rn}}/release-order/",
        f"{API}/tasks/{{rn}}/pause/",
        f"{API}/tasks/{{rn}}/resume/",
        f"{API}/tasks/{{rn}}/steps/",
        f"{API}/tasks/{{rn}}/step/",
        f"{API}/tasks/{{rn}}/checkpoint/",
        f"{API}/tasks/{{rn}}/wait/",
        f"{API}/tasks/{{rn}}/signals/{{name}}/",
        f"{API}/signals/{{token}}/",
        f"{API}/locks/",
        f"{API}/limits/",
        f"{API}/limits/{{name}}/",
        f"{API}/rates/",
        f"{API}/rates/{{name}}/",
        f"{API}/holds/{{token}}/release/",
        f"{API}/health/",
        f"{API}/schema/",
    }
    assert set(schema["paths"][f"{API}/bulk/tasks/"]) == {"post"}
    assert set(schema["paths"][f"{API}/bulk/tasks/cancel/"]) == {"post"}
    assert set(schema["components"]["securitySchemes"]) == {"tokenAuth", "cookieAuth"}
    assert yaml.safe_load(api.get(f"{API}/schema/").content) == schema


@pytest.mark.parametrize("query", ["format=", "format=xml"])
def test_the_schema_in_an_unknown_format_is_404(api, query):
    response = api.get(f"{API}/schema/?{query}")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize("path", ["/nope/", "/tasks", "/tasks/t1/cancel"])
def test_an_unknown_route_is_a_json_404(api, path):
    assert_error(api.get(f"{API}{path}"), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("put", "/tasks/t1/"),
        ("patch", "/tasks/t1/"),
        ("get", "/tasks/t1/cancel/"),
        ("delete", "/tasks/"),
        ("post", "/queues/"),
        ("options", "/tasks/"),
    ],
)
def test_raw_writes_and_other_methods_are_405(api, method, path):
    task = TaskFactory(rn="t1")
    response = getattr(api, method)(f"{API}{path}", {"status": "completed"}, format="json")
    assert_error(response, 405, "method_not_allowed")
    assert reload(task).status == Status.READY


def test_a_finished_task_shows_what_its_run_used(api, worker):
    task = running_task(worker, rn="used")
    outcome = Outcome(task.pk, task.leases, result=1, cpu_time=0.5, peak_memory=3 * 2**20)
    Task.objects.finish_many(worker, [outcome])
    body = api.get(f"{API}/tasks/used/").json()
    assert (body["cpu_time"], body["peak_memory"]) == (0.5, 3 * 2**20)
    ready = post(api, "/tasks/", {"queue": "emails", "spec": {}}).json()
    assert (ready["cpu_time"], ready["peak_memory"]) == (None, None)
