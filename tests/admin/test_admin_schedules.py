"""The schedule admin, the "Retry selected" action and the chain on the task page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.messages.storage.fallback import FallbackStorage
from django.test import RequestFactory
from django.urls import reverse

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

    later = Schedule.objects.create(name="later", queue="q", cron="0 3 * * *")
    Schedule.objects.create(name="off", queue="q", cron="0 3 * * *", enabled=False)
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
