"""GET /events/: the stored events, newest first, by cursor pages, filtered by kind, time and
consumption, with the schedules that consumed each; the view permission; bad input as 400s."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest

import scylla_django
from scylla_django.models import Event, Schedule
from scylla_django.schedules.firings import fire
from tests.helpers import API, assert_error, assert_field_error, client_for, make_user

pytestmark = pytest.mark.django_db


def listed(client, query: str = "") -> dict:
    response = client.get(f"{API}/events/{query}")
    assert response.status_code == 200, response.content
    return response.json()


def ids(body: dict) -> list[int]:
    return [event["id"] for event in body["results"]]


def test_events_are_listed_newest_first(api):
    first = scylla_django.emit("partition.added", {"dataset": "sales"})
    second = scylla_django.emit("file.arrived", {})
    body = listed(api)
    assert ids(body) == [second.pk, first.pk]
    assert (body["next"], body["previous"]) == (None, None)
    [_, shown] = body["results"]
    assert (shown["kind"], shown["payload"]) == ("partition.added", {"dataset": "sales"})
    assert shown["time"] and shown["consumed_by"] == []


def test_the_kind_filter_is_exact(api):
    wanted = scylla_django.emit("partition.added", {})
    scylla_django.emit("partition.added.late", {})
    scylla_django.emit("partition", {})
    assert ids(listed(api, "?kind=partition.added")) == [wanted.pk]
    assert listed(api, "?kind=never.emitted")["results"] == []


def test_since_is_inclusive_and_until_exclusive(api):
    old, middle, new = (scylla_django.emit("k", {}) for _ in range(3))
    at = Event.objects.get(pk=middle.pk).time
    Event.objects.filter(pk=old.pk).update(time=at - timedelta(hours=1))
    Event.objects.filter(pk=new.pk).update(time=at + timedelta(hours=1))
    stamp = at.isoformat().replace("+", "%2B")
    assert ids(listed(api, f"?since={stamp}")) == [new.pk, middle.pk]
    assert ids(listed(api, f"?until={stamp}")) == [old.pk]
    later = (at + timedelta(hours=1)).isoformat().replace("+", "%2B")
    assert ids(listed(api, f"?since={stamp}&until={later}")) == [middle.pk]


def test_consumption_is_shown_and_filtered(api):
    Schedule.objects.create(name="loader", queue="q", trigger={"on_event": "partition.added"})
    Schedule.objects.create(name="auditor", queue="q", trigger={"on_event": "partition.added"})
    consumed = scylla_django.emit("partition.added", {})
    fire()
    untouched = scylla_django.emit("file.arrived", {})
    body = listed(api)
    assert ids(body) == [untouched.pk, consumed.pk]
    assert sorted(body["results"][1]["consumed_by"]) == ["auditor", "loader"]
    assert body["results"][0]["consumed_by"] == []
    assert ids(listed(api, "?consumed=true")) == [consumed.pk]
    assert ids(listed(api, "?consumed=false")) == [untouched.pk]
    assert ids(listed(api, "?schedule=loader")) == [consumed.pk]
    assert listed(api, "?schedule=nobody")["results"] == []


def test_pages_follow_each_other_without_gaps_or_repeats(api):
    emitted = [scylla_django.emit("k", {"n": n}).pk for n in range(5)]
    first = listed(api, "?page_size=2")
    assert ids(first) == emitted[:-3:-1] and first["previous"] is None
    second = api.get(first["next"]).json()
    assert ids(second) == emitted[2:0:-1]
    third = api.get(second["next"]).json()
    assert ids(third) == emitted[:1] and third["next"] is None
    assert ids(api.get(second["previous"]).json()) == ids(first)


def test_the_page_size_is_capped_and_the_consumers_cost_one_query(
    api, django_assert_max_num_queries
):
    Schedule.objects.create(name="loader", queue="q", trigger={"on_event": "k"})
    for _ in range(3):
        scylla_django.emit("k", {})
        fire()
    with django_assert_max_num_queries(6):  # session, user, permissions, page, consumers
        body = listed(api, "?page_size=100000")
    assert [e["consumed_by"] for e in body["results"]] == [["loader"]] * 3


def test_listing_needs_the_view_permission():
    submitter = client_for(make_user("submitter", "submit_task"))
    assert_error(submitter.get(f"{API}/events/"), 403, "permission_denied")
    assert submitter.head(f"{API}/events/").status_code == 403
    viewer = client_for(make_user("viewer", "view_task"))
    assert viewer.get(f"{API}/events/").status_code == 200
    assert_error(client_for(None).get(f"{API}/events/"), 401, "not_authenticated")


@pytest.mark.parametrize(
    ("query", "field", "code"),
    [
        ("?since=yesterday", "since", "invalid"),
        ("?until=2026-13-01T00:00:00Z", "until", "invalid"),
        ("?kind=has%20space", "kind", "invalid_kind"),
        ("?kind=a%00b", "kind", "invalid_kind"),
        # A refused value quoted in its message, with a `%` in it (was a 500).
        ("?kind=%25%3CS", "kind", "invalid_kind"),
        ("?kind=50%25s", "kind", "invalid_kind"),
        ("?schedule=100%25%25", "schedule", "invalid_schedule_name"),
        ("?kind=", "kind", "blank"),
        ("?consumed=maybe", "consumed", "invalid_choice"),
        ("?schedule=no%20such", "schedule", "invalid_schedule_name"),
        ("?page_size=0", "page_size", "invalid"),
        ("?ordering=id", "ordering", "unknown_parameter"),
        ("?knd=x", "knd", "unknown_parameter"),
    ],
)
def test_bad_input_is_a_400_with_a_code(api, query, field, code):
    assert_field_error(api.get(f"{API}/events/{query}"), field, code)


@pytest.mark.parametrize(
    "raw", [b"p=abc", b"p=-1", b"p=99999999999999999999999", b"r=x", b"\xff", b"p=1%00"]
)
@pytest.mark.parametrize("route", ["/events/", "/workers/"])
def test_a_bad_cursor_is_a_404(api, route, raw):
    cursor = base64.b64encode(raw).decode()
    assert_error(api.get(f"{API}{route}", {"cursor": cursor}), 404, "invalid_cursor")


def test_posting_takes_no_query_parameters(api):
    response = api.post(f"{API}/events/?kind=x", {"kind": "x"}, format="json")
    assert_field_error(response, "kind", "unknown_parameter")


@pytest.mark.parametrize(
    ("route", "query", "field", "code"),
    [
        ("/tasks/", "?queue=50%25s", "queue", "invalid_queue"),
        ("/tasks/", "?rn=%25%3CS", "rn", "invalid_rn"),
        ("/workers/", "?queue=50%25s", "queue", "invalid_queue"),
    ],
)
def test_a_refused_filter_value_holding_a_percent_sign_is_a_400(api, route, query, field, code):
    assert_field_error(api.get(f"{API}{route}{query}"), field, code)
