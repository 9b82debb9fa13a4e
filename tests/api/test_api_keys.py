"""The API of the keys the lease takes: `locks`, `limits`, `order_key`, `order_on_failure` and
`rate_key` in `POST /tasks/` and `POST /bulk/tasks/`, and a task's keys as the API shows them."""

from __future__ import annotations

import pytest

from scylla_django.db import keys as db_keys
from scylla_django.models import Key, Task
from tests.helpers import API, assert_error, assert_field_error, post

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

KEYED = {
    "locks": ["invoice:7", ["ledger", "shared"]],
    "limits": ["stripe"],
    "order_key": "customer:9",
    "order_on_failure": "continue",
    "rate_key": "stripe",
}


@pytest.fixture(autouse=True)
def configured(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 3}, "RATES": {"stripe": "100/m"}}


def test_a_submission_with_keys_is_201_and_shows_them(api):
    response = post(api, "/tasks/", {"queue": "invoices", "spec": {"id": 7}, **KEYED})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["locks"] == [["invoice:7", "exclusive"], ["ledger", "shared"]]
    assert (body["limits"], body["rate_key"]) == (["stripe"], "stripe")
    assert (body["order_key"], body["order_on_failure"]) == ("customer:9", "continue")
    task = Task.objects.get(rn=body["rn"])
    assert task.keys == sorted(["L:invoice:7", "S:ledger", "C:stripe", "O:customer:9", "R:stripe"])
    detail = api.get(f"{API}/tasks/{body['rn']}/").json()
    assert {k: detail[k] for k in KEYED} == {k: body[k] for k in KEYED}


def test_a_task_without_keys_shows_none(api):
    body = post(api, "/tasks/", {"queue": "q", "spec": {}}).json()
    assert [body[k] for k in KEYED] == [[], [], None, None, None]


def test_an_order_key_blocks_on_failure_by_default(api):
    body = post(api, "/tasks/", {"queue": "q", "spec": {}, "order_key": "c:1"}).json()
    assert body["order_on_failure"] == "block"


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"locks": [""]}, "locks", "invalid_key"),
        ({"locks": ["x" * 201]}, "locks", "invalid_key"),
        ({"locks": [7]}, "locks", "invalid_key"),
        ({"locks": "invoice:7"}, "locks", "invalid_key"),
        ({"locks": [["a", "sometimes"]]}, "locks", "invalid_key"),
        ({"locks": [["a", ["shared"]]]}, "locks", "invalid_key"),
        ({"locks": [["a", {"mode": "shared"}]]}, "locks", "invalid_key"),
        ({"locks": ["a", ["a", "shared"]]}, "locks", "invalid_key"),
        ({"limits": ["nope"]}, "limits", "unknown_limit"),
        ({"limits": [""]}, "limits", "invalid_key"),
        ({"limits": "stripe"}, "limits", "invalid_key"),
        ({"order_key": ""}, "order_key", "invalid_key"),
        ({"order_key": 9}, "order_key", "invalid_key"),
        ({"order_key": "x" * 201}, "order_key", "invalid_key"),
        ({"order_key": "c", "order_on_failure": "skip"}, "order_on_failure", "invalid_key"),
        ({"order_on_failure": "continue"}, "order_on_failure", "invalid_key"),
        ({"rate_key": "nope"}, "rate_key", "unknown_rate"),
        ({"rate_key": ["stripe"]}, "rate_key", "invalid_key"),
    ],
)
def test_bad_keys_are_400_with_a_code_and_write_nothing(api, body, field, code):
    response = post(api, "/tasks/", {"queue": "q", "spec": {}, **body})
    assert_field_error(response, field, code)
    assert not Task.objects.exists()
    assert not Key.objects.exists()


def test_bulk_takes_keys_per_item_and_reports_a_bad_one(api):
    response = post(
        api,
        "/bulk/tasks/",
        [
            {"queue": "q", "spec": {"n": 1}, "rn": "one", **KEYED},
            {"queue": "q", "spec": {"n": 2}, "rn": "two", "limits": ["nope"]},
            {"queue": "q", "spec": {"n": 3}, "rn": "three", "locks": [""]},
            {"queue": "q", "spec": {"n": 4}, "rn": "four", "order_key": "customer:9"},
        ],
    )
    assert response.status_code == 200, response.content
    outcomes = response.json()
    assert [o["outcome"] for o in outcomes] == ["inserted", "invalid", "invalid", "inserted"]
    assert "limits" in outcomes[1]["errors"] and "locks" in outcomes[2]["errors"]
    assert sorted(Task.objects.values_list("rn", flat=True)) == ["four", "one"]
    assert Task.objects.get(rn="one").keys == sorted(
        ["L:invoice:7", "S:ledger", "C:stripe", "O:customer:9", "R:stripe"]
    )
    assert Task.objects.get(rn="four").order_key == "customer:9"


def test_bulk_keyed_items_are_leased_under_their_keys(api, worker):
    post(
        api,
        "/bulk/tasks/",
        [{"queue": "default", "spec": {"n": n}, "locks": ["one-at-a-time"]} for n in range(3)],
    )
    assert len(Task.objects.lease(worker, ["default"], limit=3)) == 1


@pytest.mark.parametrize("path", ["/tasks/", "/bulk/tasks/"])
def test_keys_on_a_database_without_key_triggers_are_409_not_supported(api, monkeypatch, path):
    monkeypatch.setattr(db_keys, "takes_keys", lambda connection: False)
    item = {"queue": "q", "spec": {}, "locks": ["invoice:7"]}
    response = post(api, path, item if path == "/tasks/" else [{"queue": "q", "spec": {}}, item])
    assert_error(response, 409, "not_supported")
    assert not Task.objects.exists()
    assert not Key.objects.exists()


def test_a_family_member_and_a_fair_key_over_http(api, settings):
    settings.SCYLLA = {"LIMITS": {"tenant": {"default": 2}}, "RATES": {"api": {"default": "5/m"}}}
    body = {"queue": "q", "spec": {}, "limits": ["tenant:5"], "rate_key": "api:5"}
    response = post(api, "/tasks/", {**body, "fair_key": "5"})
    assert response.status_code == 201, response.content
    task = Task.objects.get(rn=response.json()["rn"])
    assert (task.keys, task.fair_key) == (["C:tenant:5", "R:api:5"], "5")
    response = post(api, "/tasks/", {**body, "fair_key": 1.5})
    assert_field_error(response, "fair_key", "invalid_key")
