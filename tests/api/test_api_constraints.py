"""The API of run constraints: create and change them, bad ones are 400 with a code, "why
didn't it fire?" and the calendar of next runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scylla_django.models import Schedule, WaitingRun
from scylla_django.schedules import tick
from tests.helpers import API, assert_field_error, client_for, make_user, post

pytestmark = pytest.mark.django_db(transaction=True)

NIGHTLY = {
    "name": "nightly",
    "every": "1h",
    "queue": "r",
    "window": "01:00-03:00",
    "timezone": "Europe/Malta",
    "min_gap": "20h",
    "max_runs": "1/d",
    "wait_timeout": "1d",
    "on_timeout": "force",
}


@pytest.fixture
def operator():
    return client_for(
        make_user("operator", "view_schedule", "add_schedule", "change_schedule", "delete_schedule")
    )


def test_constraints_are_created_shown_and_changed(operator):
    response = post(operator, "/schedules/", NIGHTLY)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["window"] == ["01:00-03:00"]
    assert (body["min_gap"], body["wait_timeout"]) == (72000.0, 86400.0)
    assert (body["max_runs"], body["max_concurrent"]) == ("1/d", None)
    assert (body["when_unmet"], body["on_timeout"], body["waiting"]) == ("wait", "force", None)

    response = operator.patch(
        f"{API}/schedules/nightly/",
        {"window": ["22:00-02:00", "12:00-12:30"], "max_concurrent": 2, "min_gap": None},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["window"] == ["22:00-02:00", "12:00-12:30"]
    assert (body["max_concurrent"], body["min_gap"], body["max_runs"]) == (2, None, "1/d")


@pytest.mark.parametrize(
    ("change", "field", "code"),
    [
        ({"window": "03:00-03:00"}, "window", "invalid_window"),
        ({"window": "nightly"}, "window", "invalid_window"),
        ({"window": []}, "window", "invalid_window"),
        ({"max_runs": "0/h"}, "max_runs", "invalid_max_runs"),
        ({"min_gap": -60}, "min_gap", "invalid_min_gap"),
        ({"max_concurrent": 0}, "max_concurrent", "invalid_max_concurrent"),
        ({"when_unmet": "maybe"}, "when_unmet", "invalid_when_unmet"),
        ({"on_timeout": "retry"}, "on_timeout", "invalid_on_timeout"),
    ],
)
def test_bad_constraints_are_400_with_a_code(operator, change, field, code):
    assert_field_error(post(operator, "/schedules/", {**NIGHTLY, **change}), field, code)
    assert not Schedule.objects.exists()
    assert post(operator, "/schedules/", NIGHTLY).status_code == 201
    response = operator.patch(f"{API}/schedules/nightly/", change, format="json")
    assert_field_error(response, field, code)
    assert Schedule.objects.get().window == ["01:00-03:00"]


def test_why_says_what_is_unmet_and_what_waits(operator):
    # A window that is closed now, whatever the hour: the minute just past.
    now = datetime.now(UTC)
    start = now - timedelta(minutes=2)
    window = f"{start:%H:%M}-{now - timedelta(minutes=1):%H:%M}"
    body = {"name": "closed", "every": "1m", "queue": "r", "window": window}
    assert post(operator, "/schedules/", body).status_code == 201
    why = operator.get(f"{API}/schedules/closed/why/").json()
    assert why["runs"] is False and why["waiting"] is None
    [unmet] = why["unmet"]
    assert unmet["code"] == "window"
    assert unmet["detail"].startswith("waiting for window ")
    assert unmet["until"] is not None

    tick(now=Schedule.objects.get().next_run)
    why = operator.get(f"{API}/schedules/closed/why/").json()
    assert why["waiting"]["reason"].startswith("waiting for window ")
    listed = operator.get(f"{API}/schedules/").json()
    assert listed[0]["waiting"]["rn"] == WaitingRun.objects.get().rn

    assert post(operator, "/schedules/", {"name": "free", "every": "1m", "queue": "r"})
    why = operator.get(f"{API}/schedules/free/why/").json()
    assert (why["runs"], why["unmet"], why["waiting"]) == (True, [], None)
    assert operator.get(f"{API}/schedules/nope/why/").status_code == 404


def test_the_calendar_lists_the_next_runs_with_windows_applied(operator):
    body = {"name": "hourly", "cron": "0 * * * *", "queue": "r", "window": "01:00-03:00"}
    assert post(operator, "/schedules/", body).status_code == 201
    entries = operator.get(f"{API}/schedules/hourly/calendar/?count=24").json()
    assert len(entries) == 24
    inside = [e for e in entries if e["note"] == ""]
    assert sorted(datetime.fromisoformat(e["tick"]).hour for e in inside) == [1, 2]
    waiting = [e for e in entries if e["note"].startswith("waits for window")]
    # One firing waits per closed stretch (one or two in a day, after the hour now).
    assert 1 <= len(waiting) <= 2
    assert all(datetime.fromisoformat(e["runs"]).hour == 1 for e in waiting)
    assert len(inside) + len(waiting) + sum(e["runs"] is None for e in entries) == 24
    assert all(e["runs"] is None for e in entries if e["note"].startswith("merged"))
    assert len(operator.get(f"{API}/schedules/hourly/calendar/").json()) == 10


@pytest.mark.parametrize("count", ["0", "ten", "-1"])
def test_a_bad_calendar_count_is_400(operator, count):
    body = {"name": "hourly", "cron": "0 * * * *", "queue": "r"}
    assert post(operator, "/schedules/", body).status_code == 201
    response = operator.get(f"{API}/schedules/hourly/calendar/?count={count}")
    assert_field_error(response, "count", "invalid")
    response = operator.get(f"{API}/schedules/hourly/calendar/?size=3")
    assert_field_error(response, "size", "unknown_parameter")
