"""The API of events and triggers: POST /events/, schedules with a trigger, their firings and
what is unmet, and bad triggers as 400s with codes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils.dateparse import parse_datetime

from scylla_django.models import Consumption, Event, Firing, Schedule, Task
from scylla_django.schedules.firings import fire, release
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


def test_why_shows_where_a_trigger_counts_from_and_a_change_moves_it(operator):
    post(operator, "/events/", {"kind": "partition.added", "payload": {}})
    old = Event.objects.get()
    trigger = {"on_event": "partition.added", "count": 2}
    assert post(operator, "/schedules/", {"name": "two", "queue": "q", "trigger": trigger})
    why = operator.get(f"{API}/schedules/two/why/").json()
    assert why["trigger"]["since"] == "change"
    assert why["trigger"]["counts_after"] == old.pk and why["trigger"]["counts_from"]
    assert why["trigger"]["unmet"] == ["count 0 of 2 partition.added"]  # the old one is not counted
    assert why["trigger"]["delayed"] == []
    post(operator, "/events/", {"kind": "partition.added", "payload": {}})
    response = operator.patch(f"{API}/schedules/two/", {"queue": "other"}, format="json")
    assert response.status_code == 200, response.content
    assert operator.get(f"{API}/schedules/two/why/").json()["trigger"] == {
        **why["trigger"],
        "unmet": ["count 1 of 2 partition.added"],
    }
    changed = {"on_event": "partition.added", "count": 1}
    response = operator.patch(f"{API}/schedules/two/", {"trigger": changed}, format="json")
    assert response.status_code == 200, response.content
    after = operator.get(f"{API}/schedules/two/why/").json()["trigger"]
    assert after["counts_after"] == Event.objects.order_by("-id").first().pk
    assert after["unmet"] == ["count 0 of 1 partition.added"]
    assert fire() == []
    every = {**changed, "since": "all"}
    operator.patch(f"{API}/schedules/two/", {"trigger": every}, format="json")
    why = operator.get(f"{API}/schedules/two/why/").json()
    assert why["trigger"]["since"] == "all" and why["trigger"]["counts_after"] is None
    assert why["trigger"]["unmet"] == []
    assert operator.get(f"{API}/schedules/nope/why/").status_code == 404


def test_why_of_a_schedule_without_a_trigger_has_none(operator):
    post(operator, "/schedules/", {"name": "s", "queue": "q", "every": "5m"})
    assert operator.get(f"{API}/schedules/s/why/").json()["trigger"] is None


def test_a_delayed_firing_shows_its_due_time_and_goes_with_its_schedule(operator):
    trigger = {"on_event": "partition.added", "count": 2, "delay": "10m"}
    post(operator, "/schedules/", {"name": "later", "queue": "q", "trigger": trigger})
    for _ in range(2):
        post(operator, "/events/", {"kind": "partition.added", "payload": {}})
    [fired] = fire()
    due = Firing.objects.get().due
    [firing] = operator.get(f"{API}/schedules/later/").json()["firings"]
    assert (firing["rn"], firing["outcome"]) == (fired.rn, "delayed")
    assert parse_datetime(firing["due"]) == due
    [waiting] = operator.get(f"{API}/schedules/later/why/").json()["trigger"]["delayed"]
    assert waiting["rn"] == fired.rn and parse_datetime(waiting["due"]) == due
    deleter = client_for(make_user("deleter", "delete_schedule"))
    assert deleter.delete(f"{API}/schedules/later/").status_code == 204
    assert not Firing.objects.exists() and not Consumption.objects.exists()
    assert release(now=due + timedelta(hours=1)) == []
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("trigger", "code"),
    [
        ({"on_event": "x", "delay": "-1m"}, "invalid_duration"),
        ({"on_event": "x", "delay": "later"}, "invalid_duration"),
        ({"on_event": "x", "since": "yesterday"}, "invalid_since"),
        ({"any": [{"on_event": "x", "since": "all"}]}, "invalid_trigger"),
        ({"any": [{"on_event": "x", "delay": "5m"}]}, "invalid_trigger"),
    ],
)
def test_a_bad_delay_or_since_is_a_400_with_a_code(operator, trigger, code):
    response = post(operator, "/schedules/", {"name": "s", "queue": "q", "trigger": trigger})
    assert_error_code(response, code)
    post(operator, "/schedules/", {"name": "s", "queue": "q", "trigger": {"on_event": "x"}})
    response = operator.patch(f"{API}/schedules/s/", {"trigger": trigger}, format="json")
    assert_error_code(response, code)
    assert Schedule.objects.get(name="s").trigger == {"on_event": "x"}


def assert_error_code(response, code: str) -> None:
    assert response.status_code == 400, response.content
    assert code in [e["code"] for e in response.json()["errors"]["trigger"]], response.json()
