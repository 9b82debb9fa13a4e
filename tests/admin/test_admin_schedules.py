"""The schedule admin, the "Retry selected" action and the chain on the task page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.messages.storage.fallback import FallbackStorage
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from scylla_django.admin.schedules import chain, retry_selected
from scylla_django.enums import Status
from scylla_django.models import Schedule, Task

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:scylla_django_schedule_changelist")
ADD = reverse("admin:scylla_django_schedule_add")


@pytest.fixture
def schedule():
    return Schedule.objects.create(
        name="sync", queue="q", every=timedelta(minutes=5), last_task="schedule:sync:x"
    )


def test_the_list_shows_the_next_run_and_the_last_task_with_its_status(admin_client, schedule):
    Task.objects.submit("q", {}, rn="schedule:sync:x")
    page = admin_client.get(CHANGELIST).content.decode()
    assert "every 5 min" in page and "schedule:sync:x</a> (ready)" in page


def test_add_validates_like_the_settings(admin_client):
    response = admin_client.post(
        ADD,
        {
            "name": "n",
            "cron": "nope",
            "queue": "q",
            "timezone": "UTC",
            "spec": "{}",
            "priority": 0,
            "catch_up": "one",
        },
    )
    assert response.status_code == 200 and "Invalid cron expression" in response.content.decode()
    response = admin_client.post(
        ADD,
        {
            "name": "n",
            "every": "5m",
            "queue": "q",
            "timezone": "UTC",
            "spec": "{}",
            "priority": 0,
            "catch_up": "one",
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    created = Schedule.objects.get(name="n")
    assert created.every == timedelta(minutes=5) and created.next_run is not None


def test_run_now_and_disable(admin_client, schedule):
    admin_client.post(CHANGELIST, {"action": "run_now", "_selected_action": [schedule.pk]})
    assert Task.objects.filter(rn__startswith="schedule:sync:manual-").count() == 1
    admin_client.post(CHANGELIST, {"action": "disable_selected", "_selected_action": [schedule.pk]})
    assert not Schedule.objects.get().enabled


def test_a_settings_schedule_cannot_be_deleted_here(admin_client, schedule):
    Schedule.objects.filter(pk=schedule.pk).update(from_settings=True)
    url = reverse("admin:scylla_django_schedule_delete", args=[schedule.pk])
    assert admin_client.get(url).status_code == 403


def test_retry_selected_and_the_chain(admin_user, worker):
    Task.objects.submit("default", {}, rn="x")
    Task.objects.submit("default", {}, rn="y")
    [task] = Task.objects.filter(rn="x").lease(worker, ["default"])
    task.abort(worker, [{"code": "no"}])
    request = RequestFactory().post("/")
    request.user = admin_user
    request.session = {}
    request._messages = FallbackStorage(request)
    retry_selected(admin.site._registry[Task], request, Task.objects.all())
    assert [str(m) for m in request._messages] == [
        "1 retried, 1 skipped (not aborted or cancelled, or retried)."
    ]
    successor = Task.objects.get(retry_of="x")
    assert successor.status == Status.READY
    assert "next: <a" in chain(Task.objects.get(rn="x"))
    assert "previous: <a" in chain(successor) and "attempt 2" in chain(successor)
    assert "first: <a" in chain(successor)
    assert "first:" not in chain(Task.objects.get(rn="x"))  # its own root: no link to itself


def test_upcoming_lists_the_next_runs_soonest_first(schedule):
    from scylla_django.admin.schedules import upcoming
    from scylla_django.schedules import reschedule

    # Once a day, twelve hours from now: after the 5-minute schedule's next run whatever the
    # time of day (a fixed hour came first in the five minutes before it, once a day).
    daily = f"0 {(timezone.now().hour + 12) % 24} * * *"
    later = Schedule.objects.create(name="later", queue="q", cron=daily)
    Schedule.objects.create(name="off", queue="q", cron=daily, enabled=False)
    reschedule(schedule)
    reschedule(later)
    assert [s.name for s in upcoming()] == ["sync", "later"]


def test_the_task_admin_offers_retry_and_shows_the_chain(admin_client, worker):
    Task.objects.submit("default", {}, rn="chained")
    [task] = Task.objects.lease(worker, ["default"])
    task.abort(worker, [{"code": "no"}])
    tasks_list = reverse("admin:scylla_django_task_changelist")
    response = admin_client.post(
        tasks_list,
        {"action": "retry_selected", "index": "0", "_selected_action": [task.pk]},
        follow=True,
    )
    assert "1 retried" in response.content.decode()
    successor = Task.objects.get(retry_of="chained")
    page = admin_client.get(reverse("admin:scylla_django_task_change", args=[successor.pk]))
    html = page.content.decode()
    assert "attempts in the chain" in html.lower() and "previous: <a" in html


# -- run constraints ------------------------------------------------------------------------------

NIGHTLY = {
    "name": "nightly",
    "every": "1h",
    "queue": "q",
    "timezone": "Europe/Malta",
    "spec": "{}",
    "priority": 0,
    "catch_up": "one",
    "enabled": "on",
    "window": "01:00-03:00, 22:00-23:00",
    "min_gap": "20h",
    "max_runs": "2/d",
    "when_unmet": "wait",
    "wait_timeout": "1d",
    "on_timeout": "force",
}


def test_constraints_are_added_and_shown_on_the_schedule_page(admin_client):
    response = admin_client.post(ADD, NIGHTLY)
    assert response.status_code == 302, response.content.decode()
    created = Schedule.objects.get(name="nightly")
    assert created.window == ["01:00-03:00", "22:00-23:00"]
    assert (created.min_gap, created.max_runs) == (timedelta(hours=20), "2/d")
    assert (created.wait_timeout, created.on_timeout) == (timedelta(days=1), "force")
    page = admin_client.get(reverse("admin:scylla_django_schedule_change", args=[created.pk]))
    text = page.content.decode()
    assert "01:00-03:00, 22:00-23:00" in text  # the form shows what it saved
    assert "why it does not fire now" in text.lower()
    assert ("window: waiting for window" in text) != ("Every run constraint is met" in text)
    assert text.count("<tr><td>") >= 10  # the next runs


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"window": "03:00-03:00"}, "never opens"),
        ({"window": "late"}, "HH:MM-HH:MM"),
        ({"max_runs": "0/h"}, "max_runs"),
        ({"min_gap": "-5m"}, "min_gap must be a positive duration"),
        ({"when_unmet": "later"}, "later"),
    ],
)
def test_bad_constraints_are_form_errors(admin_client, change, message):
    response = admin_client.post(ADD, {**NIGHTLY, **change})
    assert response.status_code == 200 and message in response.content.decode()
    assert not Schedule.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_page_says_why_it_did_not_fire_and_what_waits(admin_client):
    from datetime import UTC, datetime

    from scylla_django.schedules import clean_definition, next_tick, tick

    now = datetime.now(UTC)
    window = f"{now - timedelta(minutes=3):%H:%M}-{now - timedelta(minutes=2):%H:%M}"
    definition = clean_definition("closed", {"every": "1m", "queue": "q", "window": window})
    schedule = Schedule.objects.create(
        name="closed", next_run=next_tick(definition, now), **definition.fields()
    )
    page = admin_client.get(reverse("admin:scylla_django_schedule_change", args=[schedule.pk]))
    assert "window: waiting for window" in page.content.decode()
    tick(now=schedule.next_run)
    listing = admin_client.get(CHANGELIST).content.decode()
    assert "waiting for window" in listing and "(since " in listing
