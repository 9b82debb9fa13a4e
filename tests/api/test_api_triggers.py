"""The API of events and triggers: POST /events/, schedules with a trigger, their firings and
what is unmet, and bad triggers as 400s with codes."""

from __future__ import annotations

import pytest

from scylla_django.firings import fire
from scylla_django.models import Event, Schedule
from tests.helpers import API, assert_error, client_for, make_user, post

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator():
    return client_for(
        make_user("operator", "view_schedule", "add_schedule", "change_schedule", "submit_task")
    )


def test_post_events_emits_an_event(api):
    response = post(api, "/events/", {"kind": "partition.added", "payload": {"dataset": "s"}})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["kind"], body["payload"]) == ("partition.added", {"dataset": "s"})
    assert body["time"] and Event.objects.get(pk=body["id"]).payload == {"dataset": "s"}


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"kind": "has space"}, "kind", "invalid_kind"),
        ({"kind": "x", "payload": [1]}, "payload", "invalid_payload"),
        ({"payload": {}}, "kind", "required"),
        ({"kind": "x", "colour": 1}, "colour", "unknown_field"),
    ],
)
def test_bad_events_are_400(api, body, field, code):
    response = post(api, "/events/", body)
    assert response.status_code == 400, response.content
    assert code in [e["code"] for e in response.json()["errors"][field]], response.json()
    assert not Event.objects.exists()


def test_emitting_needs_the_submit_permission():
    viewer = client_for(make_user("viewer", "view_task"))
    assert_error(post(viewer, "/events/", {"kind": "x"}), 403, "permission_denied")


def test_a_schedule_with_a_trigger_shows_its_firings_and_what_is_unmet(operator):
    trigger = {"on_event": "partition.added", "match": {"dataset": "sales"}, "count": 2}
    response = post(operator, "/schedules/", {"name": "two", "queue": "load", "trigger": trigger})
    assert response.status_code == 201, response.content
    assert response.json()["trigger"] == trigger and response.json()["next_run"] is None
    post(operator, "/events/", {"kind": "partition.added", "payload": {"dataset": "sales"}})
    detail = operator.get(f"{API}/schedules/two/").json()
    assert detail["unmet"] == ["count 1 of 2 partition.added {dataset=sales}"]
    assert detail["firings"] == []
    post(operator, "/events/", {"kind": "partition.added", "payload": {"dataset": "sales"}})
    [fired] = fire()
    detail = operator.get(f"{API}/schedules/two/").json()
    assert detail["unmet"] == ["count 0 of 2 partition.added {dataset=sales}"]
    [firing] = detail["firings"]
    assert firing["rn"] == fired.rn == detail["last_task"]
    assert firing["outcome"] == "submitted"
    assert [e["id"] for e in firing["events"]] == list(fired.events)
    assert all(e["payload"] == {"dataset": "sales"} for e in firing["events"])


def test_a_schedule_can_change_between_cron_and_trigger(operator):
    post(operator, "/schedules/", {"name": "s", "queue": "q", "every": "5m"})
    response = operator.patch(f"{API}/schedules/s/", {"trigger": {"on_task": "a"}}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["trigger"], body["every"], body["next_run"]) == ({"on_task": "a"}, None, None)
    response = operator.patch(f"{API}/schedules/s/", {"every": "1m"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["trigger"] is None and response.json()["next_run"] is not None


@pytest.mark.parametrize(
    ("trigger", "code"),
    [
        ({"all": []}, "empty_group"),
        ({"on_event": "x", "match": "dataset=sales"}, "invalid_match"),
        ({"on_event": "x", "count": -1}, "invalid_count"),
        ({"on_event": "x", "quiet": "-1h"}, "invalid_duration"),
        ({"on_task": "a", "status": "running"}, "invalid_status"),
    ],
)
def test_bad_triggers_are_400_with_a_code(operator, trigger, code):
    response = post(operator, "/schedules/", {"name": "s", "queue": "q", "trigger": trigger})
    assert response.status_code == 400, response.content
    assert code in [e["code"] for e in response.json()["errors"]["trigger"]], response.json()
    assert not Schedule.objects.exists()
