"""The API of unique keys: `POST /tasks/` and `POST /bulk/tasks/` with `unique_key`,
`unique_window` and `on_conflict`."""

from __future__ import annotations

import pytest

from scylla_django.models import Task
from tests.helpers import assert_error, assert_field_error, post

pytestmark = [pytest.mark.django_db, pytest.mark.keys]


def test_a_new_key_is_201_and_a_held_one_returns_the_holder_with_200(api):
    created = post(api, "/tasks/", {"queue": "invoices", "spec": {"id": 7}, "unique_key": "i:7"})
    assert created.status_code == 201, created.content
    assert created.json()["unique_key"] == "i:7"
    again = post(api, "/tasks/", {"queue": "invoices", "spec": {"id": 8}, "unique_key": "i:7"})
    assert again.status_code == 200, again.content
    assert again.json()["rn"] == created.json()["rn"]
    assert again.json()["spec"] == {"id": 7}
    assert Task.objects.count() == 1


def test_raise_is_409_duplicate_naming_the_holder_and_the_key(api):
    first = post(api, "/tasks/", {"queue": "q", "spec": {}, "unique_key": "k"}).json()
    response = post(
        api, "/tasks/", {"queue": "q", "spec": {}, "unique_key": "k", "on_conflict": "raise"}
    )
    body = assert_error(response, 409, "duplicate")
    assert (body["rn"], body["key"]) == (first["rn"], "k")


def test_replace_is_200_with_the_replaced_task(api):
    first = post(api, "/tasks/", {"queue": "q", "spec": {"v": 1}, "unique_key": "k"}).json()
    response = post(
        api,
        "/tasks/",
        {
            "queue": "q",
            "spec": {"v": 2},
            "priority": 5,
            "unique_key": "k",
            "on_conflict": "replace",
        },
    )
    assert response.status_code == 200, response.content
    assert response.json()["rn"] == first["rn"]
    assert (response.json()["spec"], response.json()["priority"]) == ({"v": 2}, 5)


@pytest.mark.parametrize(
    ("window", "seconds"), [(3600, 3600.0), ("1h", 3600.0), ("500ms", 0.5), (1.5, 1.5)]
)
def test_the_window_is_seconds_or_a_duration_string(api, window, seconds):
    response = post(
        api, "/tasks/", {"queue": "q", "spec": {}, "unique_key": "k", "unique_window": window}
    )
    assert response.status_code == 201, response.content
    assert response.json()["unique_window"] == seconds


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"unique_key": ""}, "unique_key", "invalid_unique_key"),
        ({"unique_key": "x" * 201}, "unique_key", "invalid_unique_key"),
        ({"unique_key": 7}, "unique_key", "invalid_unique_key"),
        ({"unique_key": ["k"]}, "unique_key", "invalid_unique_key"),
        ({"unique_key": "k", "unique_window": -5}, "unique_window", "invalid_unique_window"),
        ({"unique_key": "k", "unique_window": "later"}, "unique_window", "invalid_unique_window"),
        ({"unique_key": "k", "on_conflict": "merge"}, "on_conflict", "invalid_on_conflict"),
    ],
)
def test_bad_input_is_400_with_a_code_and_writes_nothing(api, body, field, code):
    response = post(api, "/tasks/", {"queue": "q", "spec": {}, **body})
    assert_field_error(response, field, code)
    assert not Task.objects.exists()


def test_bulk_reports_each_keyed_item(api):
    holder = post(api, "/tasks/", {"queue": "q", "spec": {}, "unique_key": "held"}).json()
    response = post(
        api,
        "/bulk/tasks/",
        [
            {"queue": "q", "spec": {}, "unique_key": "held"},
            {"queue": "q", "spec": {}, "unique_key": "new"},
            {"queue": "q", "spec": {"v": 2}, "unique_key": "new", "on_conflict": "replace"},
            {"queue": "q", "spec": {}, "unique_key": ""},
            {"queue": "q", "spec": {}},
        ],
    )
    assert response.status_code == 200, response.content
    outcomes = response.json()
    assert [o["outcome"] for o in outcomes] == [
        "duplicate",
        "inserted",
        "replaced",
        "invalid",
        "inserted",
    ]
    assert outcomes[0]["rn"] == holder["rn"]
    assert outcomes[2]["rn"] == outcomes[1]["rn"]
    assert Task.objects.get(unique_key="new").spec == {"v": 2}
