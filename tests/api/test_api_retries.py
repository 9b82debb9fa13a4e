"""The API of retries, follow-ups and schedules."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from scylla_django.enums import Status
from scylla_django.followups import release_followups
from scylla_django.models import AFTER_PARENTS, Schedule, Task, Worker
from scylla_django.schedules import configured as schedules_configured
from tests.helpers import (
    API,
    assert_error,
    assert_field_error,
    client_for,
    make_user,
    post,
    run_in_threads,
    worker_of,
)

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = {"max_attempts": 3, "backoff": "fixed", "delay": 60}
ERROR = {"code": "exception", "args": {"type": "builtins.TimeoutError"}, "description": "slow"}


@pytest.fixture
def as_worker(worker_user):
    return client_for(worker_user)


@pytest.fixture
def mine(worker_user) -> Worker:
    return worker_of(worker_user)


def lease(worker: Worker) -> Task:
    [task] = Task.objects.lease(worker, ["default"], lease_length=60)
    return task


# -- retries ------------------------------------------------------------------------------------


def test_an_abort_names_the_retry_it_submitted(api, as_worker, mine):
    response = post(api, "/tasks/", {"queue": "default", "spec": {}, "rn": "t", "retry": POLICY})
    assert response.status_code == 201, response.content
    assert (response.json()["attempt"], response.json()["root"]) == (1, None)
    task = lease(mine)
    response = post(
        as_worker,
        f"/tasks/{task.rn}/abort/",
        {"worker": mine.name, "lease": 1, "errors": [ERROR]},
    )
    assert response.status_code == 200, response.content
    assert (response.json()["status"], response.json()["successor"]) == ("aborted", "t:retry-2")
    retry = api.get(f"{API}/tasks/t:retry-2/").json()
    assert (retry["retry_of"], retry["root"], retry["attempt"]) == ("t", "t", 2)


def test_retry_false_and_true_in_the_abort_body(api, as_worker, mine):
    post(api, "/tasks/", {"queue": "default", "spec": {}, "rn": "a", "retry": POLICY})
    body = {"worker": mine.name, "lease": 1, "errors": [ERROR], "retry": False}
    assert post(as_worker, f"/tasks/{lease(mine).rn}/abort/", body).json()["successor"] is None
    post(api, "/tasks/", {"queue": "default", "spec": {}, "rn": "b"})
    body = {"worker": mine.name, "lease": 1, "errors": [{"code": "busy"}], "retry": True}
    assert (
        post(as_worker, f"/tasks/{lease(mine).rn}/abort/", body).json()["successor"] == "b:retry-2"
    )


def test_an_error_may_ask_for_a_retry(api, as_worker, mine):
    post(api, "/tasks/", {"queue": "default", "spec": {}, "rn": "e", "retry": POLICY})
    body = {"worker": mine.name, "lease": 1, "errors": [{"code": "busy", "retry": True}]}
    response = post(as_worker, f"/tasks/{lease(mine).rn}/abort/", body)
    assert response.json()["successor"] == "e:retry-2"
    assert response.json()["errors"][0]["retry"] is True


def test_a_timeout_abort_over_http_follows_the_policy_s_timeouts_and_crashes(api, as_worker, mine):
    """The HTTP policy takes `timeouts` (the run-time limit's `timeout`) and `crashes` (a
    run ended with no outcome, `max_leases_exceeded`) as `Retry` does."""
    for rn, switches in (("t-yes", {"crashes": False}), ("t-no", {"timeouts": False})):
        policy = {**POLICY, **switches}
        response = post(api, "/tasks/", {"queue": "default", "spec": {}, "rn": rn, "retry": policy})
        assert response.status_code == 201, response.content
        stored = Task.objects.get(rn=rn).retry_policy
        assert {key: stored[key] for key in switches} == switches
        lease(mine)
        body = {"worker": mine.name, "lease": 1, "errors": [{"code": "timeout"}]}
        response = post(as_worker, f"/tasks/{rn}/abort/", body)
        assert response.status_code == 200, response.content
        assert response.json()["successor"] == (f"{rn}:retry-2" if rn == "t-yes" else None)
    body = {"queue": "default", "spec": {}, "retry": {"crashes": "sometimes"}}
    assert_field_error(post(api, "/tasks/", body), "retry.crashes", "invalid")


def test_a_bad_policy_is_a_400(api):
    body = {"queue": "default", "spec": {}, "retry": {"max_attempts": 0}}
    assert_field_error(post(api, "/tasks/", body), "retry.max_attempts", "min_value")
    body = {"queue": "default", "spec": {}, "retry": {"backoff": "linear"}}
    assert_field_error(post(api, "/tasks/", body), "retry.backoff", "invalid_choice")


@pytest.mark.postgres
@pytest.mark.concurrency
def test_duplicated_http_aborts_submit_one_retry(api, worker_user, mine):
    post(api, "/tasks/", {"queue": "default", "spec": {}, "rn": "dup", "retry": POLICY})
    task = lease(mine)
    body = {"worker": mine.name, "lease": 1, "errors": [ERROR]}

    def abort(_):
        return post(client_for(worker_user), f"/tasks/{task.rn}/abort/", body)

    responses = run_in_threads([abort] * 3)
    assert sorted(r.status_code for r in responses) == [200, 409, 409]
    [ok] = [r for r in responses if r.status_code == 200]
    assert ok.json()["successor"] == "dup:retry-2"
    assert Task.objects.filter(retry_of="dup").count() == 1


def test_retry_by_hand(api, mine):
    post(api, "/tasks/", {"queue": "default", "spec": {"x": 1}, "rn": "h"})
    assert_error(post(api, "/tasks/h/retry/"), 409, "invalid_transition")
    lease(mine).abort(mine, [{"code": "no"}])
    response = post(api, "/tasks/h/retry/")
    assert response.status_code == 201, response.content
    assert (response.json()["rn"], response.json()["spec"]) == ("h:retry-2", {"x": 1})
    assert_error(post(api, "/tasks/h/retry/"), 409, "duplicate_task")
    assert_error(post(api, "/tasks/nope/retry/"), 404, "task_not_found")
    assert_field_error(post(api, "/tasks/h/retry/", {"x": 1}), "x", "unknown_field")


def test_retry_needs_the_submit_permission(mine):
    viewer = client_for(make_user("viewer", "view_task"))
    Task.objects.submit("default", {}, rn="p")
    lease(mine).abort(mine, [{"code": "no"}])
    assert post(viewer, "/tasks/p/retry/").status_code == 403


def test_the_list_filters_one_chain_by_its_root(api, mine):
    Task.objects.submit("default", {}, rn="r", retry=POLICY)
    Task.objects.submit("other", {}, rn="unrelated")
    lease(mine).abort(mine, [ERROR])
    Task.objects.filter(rn="r:retry-2").update(not_before=None)
    lease(mine).abort(mine, [ERROR])
    response = api.get(f"{API}/tasks/", {"root": "r", "ordering": "created"})
    assert [t["rn"] for t in response.json()["results"]] == ["r", "r:retry-2", "r:retry-3"]
    assert_field_error(api.get(f"{API}/tasks/", {"root": "bad rn"}), "root", "invalid_rn")


# -- follow-ups ---------------------------------------------------------------------------------


def test_a_follow_up_over_http(api):
    Task.objects.submit("default", {}, rn="parent")
    response = post(api, "/tasks/", {"queue": "default", "spec": {}, "after": ["parent"]})
    assert response.status_code == 201, response.content
    assert Task.objects.get(rn=response.json()["rn"]).not_before == AFTER_PARENTS
    response = post(api, "/tasks/", {"queue": "default", "spec": {}, "after": ["missing"]})
    assert_error(response, 404, "task_not_found")
    assert_field_error(
        post(api, "/tasks/", {"queue": "q", "spec": {}, "after": []}), "after", "min_length"
    )


def test_a_follow_up_shows_its_parents_and_its_own_not_before(api, mine):
    Task.objects.submit("default", {}, rn="parent-a")
    Task.objects.submit("default", {}, rn="parent-b")
    lease(mine).complete(mine)  # parent-a
    start = "2030-01-02T03:04:05Z"
    body = {"queue": "q", "spec": {}, "after": ["parent-a", "parent-b"], "not_before": start}
    submitted = post(api, "/tasks/", body).json()
    assert submitted["not_before"] == start
    post(api, "/tasks/", {"queue": "q", "spec": {}, "rn": "plain-follow-up", "after": ["parent-b"]})
    detail = api.get(f"{API}/tasks/{submitted['rn']}/").json()
    assert detail["status"] == Status.READY
    assert detail["not_before"] == start
    assert detail["parents"] == [
        {"rn": "parent-a", "status": Status.COMPLETED},
        {"rn": "parent-b", "status": Status.READY},
    ]
    assert api.get(f"{API}/tasks/plain-follow-up/").json()["not_before"] is None
    listed = api.get(f"{API}/tasks/", {"queue": "q"}).json()["results"]
    assert {task["rn"]: task["not_before"] for task in listed} == {
        submitted["rn"]: start,
        "plain-follow-up": None,
    }
    assert api.get(f"{API}/tasks/parent-a/").json()["parents"] == []


def test_a_follow_up_s_parents_go_once_it_is_released(api, mine):
    Task.objects.submit("default", {}, rn="parent")
    post(api, "/tasks/", {"queue": "q", "spec": {}, "rn": "child", "after": ["parent"]})
    lease(mine).complete(mine)
    release_followups()
    detail = api.get(f"{API}/tasks/child/").json()
    assert (detail["parents"], detail["not_before"]) == ([], None)


def test_bulk_items_cannot_be_follow_ups(api):
    Task.objects.submit("default", {}, rn="parent")
    [outcome] = post(api, "/bulk/tasks/", [{"queue": "q", "spec": {}, "after": ["parent"]}]).json()
    assert outcome["outcome"] == "invalid"


# -- schedules ----------------------------------------------------------------------------------


@pytest.fixture
def operator():
    return client_for(
        make_user(
            "operator",
            "view_schedule",
            "add_schedule",
            "change_schedule",
            "delete_schedule",
            "submit_task",
        )
    )


def test_schedule_crud_and_run_now(operator):
    body = {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Malta", "queue": "r"}
    response = post(operator, "/schedules/", body)
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["next_run"] is not None and created["every"] is None
    assert_error(post(operator, "/schedules/", body), 409, "duplicate_schedule")

    response = operator.patch(f"{API}/schedules/nightly/", {"every": "5m"}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["every"], response.json()["cron"]) == (300, "")
    response = operator.patch(f"{API}/schedules/nightly/", {"enabled": False}, format="json")
    assert response.json()["enabled"] is False

    response = post(operator, "/schedules/nightly/run/")
    assert response.status_code == 201, response.content
    assert response.json()["queue"] == "r"
    assert operator.get(f"{API}/schedules/nightly/").json()["last_task"] == response.json()["rn"]
    assert [s["name"] for s in operator.get(f"{API}/schedules/").json()] == ["nightly"]

    assert operator.delete(f"{API}/schedules/nightly/").status_code == 204
    assert_error(operator.get(f"{API}/schedules/nightly/"), 404, "schedule_not_found")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "s", "queue": "q"}, "cron"),
        ({"name": "s", "queue": "q", "cron": "bad"}, "cron"),
        ({"name": "s", "queue": "q", "every": "soon"}, "every"),
        ({"name": "s", "queue": "q", "every": 60, "timezone": "Nowhere/Else"}, "timezone"),
        ({"queue": "q", "every": 60}, "name"),
        ({"name": "s", "queue": "q", "every": 60, "colour": 1}, "colour"),
        ({"name": "s", "queue": "q", "every": 60, "catch_up": "some"}, "catch_up"),
    ],
)
def test_bad_schedules_are_400(operator, body, field):
    assert field in post(operator, "/schedules/", body).json()["errors"]
    assert not Schedule.objects.exists()


def test_settings_schedules_can_only_be_paused_over_http(operator):
    with override_settings(SCYLLA={"SCHEDULES": {"sync": {"every": "5m", "queue": "q"}}}):
        from scylla_django.schedules import sync_from_settings

        sync_from_settings(schedules_configured())
    response = operator.patch(f"{API}/schedules/sync/", {"every": 10}, format="json")
    assert_error(response, 409, "from_settings")
    assert_error(operator.delete(f"{API}/schedules/sync/"), 409, "from_settings")
    response = operator.patch(f"{API}/schedules/sync/", {"enabled": False}, format="json")
    assert response.status_code == 200 and response.json()["enabled"] is False


def test_schedules_need_their_permissions(api):
    assert api.get(f"{API}/schedules/").status_code == 403
    assert post(api, "/schedules/", {"name": "s", "queue": "q", "every": 60}).status_code == 403
    Schedule.objects.create(name="s", queue="q", every=timedelta(minutes=1))
    assert api.delete(f"{API}/schedules/s/").status_code == 403
    assert Schedule.objects.filter(name="s").exists()
    assert Task.objects.filter(status=Status.READY).count() == 0


def test_a_bad_schedule_name_over_the_api_is_a_schedule_name_error(operator):
    body = {"name": "-nightly", "every": "5m", "queue": "r"}
    response = post(operator, "/schedules/", body)
    assert response.status_code == 400, response.content
    assert "invalid_schedule_name" in response.content.decode()
    assert "queue name" not in response.content.decode()
    assert not Schedule.objects.exists()


def test_the_schedule_model_checks_its_name_as_a_schedule_name():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as exc:
        Schedule(name="-nightly", queue="r", every=timedelta(minutes=5)).full_clean()
    assert [e.code for e in exc.value.error_dict["name"]] == ["invalid_schedule_name"]
