"""Admission over HTTP: a capped queue's 429 with Retry-After, the cap route, the submitter
recorded and filtered ("my tasks"), `cancel_own_task`, and the throttles."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import override_settings

from scylla_django.enums import Status
from scylla_django.models import QueueSetting, Task, TaskOrigin
from scylla_django.models.origins import token_digest
from tests.helpers import API, assert_error, client_for, make_user

pytestmark = pytest.mark.django_db


def submit(api, queue: str = "capped", **body):
    return api.post(f"{API}/tasks/", {"queue": queue, "spec": {}, **body}, format="json")


def test_a_full_queue_answers_429_with_retry_after_and_writes_nothing(api):
    QueueSetting.objects.cap("capped", 2)
    assert submit(api).status_code == 201
    assert submit(api).status_code == 201
    response = submit(api, rn="third")
    body = assert_error(response, 429, "queue_full")
    assert body["scope"] == "queue capped" and body["max_ready"] == 2
    assert int(response["Retry-After"]) >= 1
    assert not Task.objects.filter(rn="third").exists()
    assert not TaskOrigin.objects.filter(task__rn="third").exists()
    assert Task.objects.filter(queue="capped").count() == 2


def test_shed_oldest_over_http_cancels_the_oldest_with_code_shed(api):
    QueueSetting.objects.cap("capped", 1, on_full="shed_oldest")
    assert submit(api, rn="first").status_code == 201
    assert submit(api, rn="second").status_code == 201
    first = Task.objects.get(rn="first")
    assert first.status == Status.CANCELLED
    assert first.errors[-1]["code"] == "shed"
    assert Task.objects.get(rn="second").status == Status.READY


def test_a_caller_may_choose_to_be_refused_rather_than_shed(api):
    QueueSetting.objects.cap("capped", 1, on_full="shed_oldest")
    assert submit(api, rn="first").status_code == 201
    assert_error(submit(api, rn="second", on_full="reject"), 429, "queue_full")
    assert Task.objects.get(rn="first").status == Status.READY


def test_the_bulk_route_reports_full_items(api):
    QueueSetting.objects.cap("capped", 2)
    items = [{"queue": "capped", "spec": {}, "rn": f"t{i}"} for i in range(4)]
    response = api.post(f"{API}/bulk/tasks/", items, format="json")
    assert response.status_code == 200, response.content
    assert [o["outcome"] for o in response.json()] == ["inserted", "inserted", "full", "full"]
    assert set(Task.objects.values_list("rn", flat=True)) == {"t0", "t1"}


def test_the_cap_route_sets_and_clears_a_cap(client_user):
    operator = make_user("operator", "control_queue", "view_task")
    api = client_for(operator)
    response = api.put(
        f"{API}/queues/capped/cap/", {"max_ready": 5, "on_full": "shed_oldest"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["max_ready"] == 5 and response.json()["on_full"] == "shed_oldest"
    assert QueueSetting.objects.of("capped").max_ready == 5
    assert api.get(f"{API}/queues/capped/pause/").json()["max_ready"] == 5
    response = api.put(f"{API}/queues/capped/cap/", {"max_ready": None}, format="json")
    assert response.json()["max_ready"] is None
    bad = api.put(f"{API}/queues/capped/cap/", {"max_ready": 0}, format="json")
    assert bad.status_code == 400
    assert (
        client_for(client_user)
        .put(f"{API}/queues/capped/cap/", {"max_ready": 5}, format="json")
        .status_code
        == 403
    )


def test_the_submitter_is_recorded_and_shown(api, client_user):
    response = submit(api, "q", rn="mine", submitter_name="nightly", submitter_description="d")
    assert response.status_code == 201
    origin = TaskOrigin.objects.get(task__rn="mine")
    assert origin.user == client_user and origin.kind == "token"
    assert origin.token == token_digest(client_user.auth_token.key)
    detail = api.get(f"{API}/tasks/mine/").json()["submitter"]
    assert detail == {
        "kind": "token",
        "user": "client",
        "token": origin.token,
        "name": "nightly",
        "description": "d",
        "admission_key": None,
    }


def test_the_submitters_words_are_kept_as_sent_and_measured_so(api):
    """The schema's maxLength holds for what was sent: 151 characters whose first is a
    control character (whitespace to Python) are refused, not trimmed to 150 and taken."""
    too_long = submit(api, "q", rn="long", submitter_name="\x1d" + "*" * 150)
    assert too_long.status_code == 400 and "submitter_name" in too_long.json()["errors"]
    assert not Task.objects.filter(rn="long").exists()
    assert submit(api, "q", rn="number", submitter_name=7).status_code == 400
    kept = submit(api, "q", rn="kept", submitter_name=" nightly ", submitter_description="d ")
    assert kept.status_code == 201
    origin = TaskOrigin.objects.get(task__rn="kept")
    assert (origin.name, origin.description) == (" nightly ", "d ")


def test_my_tasks_filter(api, client_user):
    other = client_for(make_user("other", "view_task", "submit_task"))
    submit(api, "q", rn="mine")
    submit(other, "q", rn="theirs")
    Task.objects.submit("q", {}, rn="system")
    listed = api.get(f"{API}/tasks/", {"mine": "true"}).json()["results"]
    assert [t["rn"] for t in listed] == ["mine"]
    others = {t["rn"] for t in api.get(f"{API}/tasks/", {"mine": "false"}).json()["results"]}
    assert others == {"theirs", "system"}
    by_name = api.get(f"{API}/tasks/", {"submitter": "other"}).json()["results"]
    assert [t["rn"] for t in by_name] == ["theirs"]


def test_cancel_own_task_lets_a_user_cancel_only_their_tasks():
    owner = client_for(make_user("owner", "view_task", "submit_task", "cancel_own_task"))
    other = client_for(make_user("other", "view_task", "submit_task"))
    submit(owner, "q", rn="own")
    submit(other, "q", rn="foreign")
    Task.objects.submit("q", {}, rn="system")
    assert owner.post(f"{API}/tasks/own/cancel/").status_code == 200
    assert_error(owner.post(f"{API}/tasks/foreign/cancel/"), 403, "not_your_task")
    assert_error(owner.post(f"{API}/tasks/system/cancel/"), 403, "not_your_task")
    assert other.post(f"{API}/tasks/foreign/cancel/").status_code == 403  # no permission
    response = owner.post(
        f"{API}/bulk/tasks/cancel/", {"rns": ["foreign", "system"]}, format="json"
    )
    assert response.json()["cancelled"] == 0
    assert Task.objects.get(rn="foreign").status == Status.READY
    assert Task.objects.get(rn="own").status == Status.CANCELLED


def test_a_user_over_the_throttle_rate_gets_429_with_retry_after(api):
    cache.clear()
    with override_settings(SCYLLA={"THROTTLE_RATES": {"user": "3/min"}}):
        for _ in range(3):
            assert api.get(f"{API}/tasks/").status_code == 200
        response = api.get(f"{API}/tasks/")
        assert_error(response, 429, "throttled")
        assert 1 <= int(response["Retry-After"]) <= 60
    cache.clear()


def test_the_token_throttle_counts_each_token_apart(client_user):
    cache.clear()
    with override_settings(SCYLLA={"THROTTLE_RATES": {"token": "2/min"}}):
        api = client_for(client_user)
        assert api.get(f"{API}/tasks/").status_code == 200
        assert api.get(f"{API}/tasks/").status_code == 200
        assert_error(api.get(f"{API}/tasks/"), 429, "throttled")
        session = client_for(None)
        session.force_login(client_user)
        assert session.get(f"{API}/tasks/").status_code == 200  # no token: not counted
    cache.clear()
