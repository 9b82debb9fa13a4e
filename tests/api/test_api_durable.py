"""Durable execution over the API: an HTTP worker records steps, its cursor and waits, each
fenced on its lease; a client or a token's holder sends a task signals."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scylla_django.enums import Status
from scylla_django.models import PARKED, Step, Task, TaskSignal, Wait, Worker
from scylla_django.models.waits import signal_token
from tests.factories import running_task
from tests.helpers import (
    API,
    assert_error,
    assert_field_error,
    client_for,
    expire,
    post,
    reload,
    worker_of,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_worker(worker_user) -> APIClient:
    return client_for(worker_user)


@pytest.fixture
def mine(worker_user) -> Worker:
    return worker_of(worker_user)


def held(mine: Worker, **body: object) -> dict:
    return {"worker": mine.name, "lease": 1, **body}


def test_an_http_worker_records_steps_and_its_cursor_and_reads_them_back(as_worker, api, mine):
    running_task(mine, rn="t1")
    answer = post(as_worker, "/tasks/t1/step/", held(mine, name="fetch", result=[1, 2]))
    assert answer.status_code == 201, answer.content
    assert (answer.json()["name"], answer.json()["size"], answer.json()["lease"]) == ("fetch", 5, 1)
    again = post(as_worker, "/tasks/t1/step/", held(mine, name="fetch", result=[3]))
    assert_error(again, 409, "step_already_recorded")
    assert post(as_worker, "/tasks/t1/checkpoint/", held(mine, cursor={"id": 9})).status_code == 200
    listing = api.get(f"{API}/tasks/t1/steps/")
    assert listing.status_code == 200, listing.content
    body = listing.json()
    assert [(s["name"], s["result"]) for s in body["steps"]] == [("fetch", [1, 2])]
    assert (body["cursor"], body["waits"], body["signals"]) == ({"id": 9}, [], [])


def test_a_step_of_a_lease_not_held_is_409_and_writes_nothing(as_worker, mine, other_worker):
    task = running_task(mine, rn="t1")
    expire(task)
    Task.objects.reset_expired()
    Task.objects.lease(other_worker, ["default"])
    answer = post(as_worker, "/tasks/t1/step/", held(mine, name="charge", result="ok"))
    assert_error(answer, 409, "lease_lost")
    assert not Step.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"name": "a b"}, "name", "invalid_name"),
        ({"name": "big", "result": "x" * 2000}, "result", "too_large"),
    ],
)
def test_a_bad_step_is_400_and_writes_nothing(as_worker, mine, settings, body, field, code):
    settings.SCYLLA = {"SPEC_SIZE_LIMIT": 1000}
    running_task(mine, rn="t1")
    answer = post(as_worker, "/tasks/t1/step/", held(mine, **body))
    assert_field_error(answer, field, code)
    assert not Step.objects.exists()


def test_an_http_worker_waits_for_a_signal_that_a_client_sends_once(as_worker, api, mine):
    task = running_task(mine, rn="t1")
    wait = held(mine, name="approval", kind="signal", signal="approved", timeout="1d")
    parked = post(as_worker, "/tasks/t1/wait/", wait)
    assert parked.status_code == 200, parked.content
    assert parked.json()["parked"] is True
    assert parked.json()["wait"]["outcome"] is None
    stored = reload(task)
    assert (stored.status, stored.owner) == (Status.READY, None)
    assert stored.not_before == Wait.objects.get(task=task).timeout
    sent = post(api, "/tasks/t1/signals/approved/", {"payload": {"by": "ann"}})
    assert sent.status_code == 201, sent.content
    assert_error(
        post(api, "/tasks/t1/signals/approved/", {"payload": 2}), 409, "signal_already_sent"
    )
    assert reload(task).not_before < Wait.objects.get(task=task).timeout
    [leased] = Task.objects.lease(mine, ["default"])
    woken = post(as_worker, "/tasks/t1/wait/", {**wait, "lease": leased.leases})
    assert woken.json()["parked"] is False
    assert (woken.json()["wait"]["outcome"], woken.json()["wait"]["payload"]) == (
        "woken",
        {"by": "ann"},
    )
    listing = api.get(f"{API}/tasks/t1/steps/").json()
    assert [s["name"] for s in listing["signals"]] == ["approved"]
    assert listing["waits"][0]["describe"].startswith("signal approved until ")


def test_an_event_wait_without_a_timeout_parks_until_woken(as_worker, mine):
    task = running_task(mine, rn="t1")
    body = held(mine, name="arrival", kind="event", event_kind="file.arrived", match={"day": 3})
    assert post(as_worker, "/tasks/t1/wait/", body).json()["parked"] is True
    assert reload(task).not_before == PARKED


def test_a_signal_to_a_finished_task_is_409_task_finished(api):
    Task.objects.submit("default", {}, rn="t1")
    Task.objects.filter(rn="t1").update(status=Status.CANCELLED)
    assert_error(post(api, "/tasks/t1/signals/late/", {}), 409, "task_finished")
    assert not TaskSignal.objects.exists()


def test_a_signal_token_sends_its_signal_once_without_credentials():
    task = Task.objects.submit("default", {}, rn="t1")
    anonymous = APIClient()
    token = signal_token(task, "paid")
    sent = post(anonymous, f"/signals/{token}/", {"payload": {"amount": 5}})
    assert sent.status_code == 201, sent.content
    assert TaskSignal.objects.get(task=task).payload == {"amount": 5}
    assert_error(post(anonymous, f"/signals/{token}/", {}), 409, "signal_already_sent")
    assert_error(post(anonymous, f"/signals/{token}x/", {}), 404, "invalid_token")


def test_a_submission_asks_for_retries_that_resume(api):
    body = {
        "queue": "default",
        "spec": {},
        "rn": "t1",
        "retry": {"max_attempts": 2, "resume": True},
    }
    answer = post(api, "/tasks/", body)
    assert answer.status_code == 201, answer.content
    assert Task.objects.get(rn="t1").retry_policy["resume"] is True
