"""The schedule admin for triggers: add one with the settings' validation, see what is unmet
and the latest firings with the events they consumed."""

from __future__ import annotations

import pytest
from django.urls import reverse

import scylla_django
from scylla_django.firings import fire
from scylla_django.models import Schedule

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:scylla_django_schedule_changelist")
ADD = reverse("admin:scylla_django_schedule_add")

FORM = {"queue": "q", "timezone": "UTC", "spec": "{}", "priority": 0, "catch_up": "one"}


def test_add_a_trigger_with_the_settings_validation(admin_client):
    response = admin_client.post(ADD, {**FORM, "name": "t", "trigger": '{"all": []}'})
    page = response.content.decode()
    assert response.status_code == 200 and "non-empty list of triggers" in page
    trigger = '{"on_event": "partition.added", "count": 2}'
    response = admin_client.post(ADD, {**FORM, "name": "t", "trigger": trigger, "enabled": "on"})
    assert response.status_code == 302, response.content.decode()[:3000]
    schedule = Schedule.objects.get(name="t")
    assert schedule.trigger == {"on_event": "partition.added", "count": 2}
    assert schedule.next_run is None


def test_the_page_says_what_is_unmet_and_shows_the_firings(admin_client):
    schedule = Schedule.objects.create(
        name="two", queue="q", trigger={"on_event": "partition.added", "count": 2}
    )
    change = reverse("admin:scylla_django_schedule_change", args=[schedule.pk])
    scylla_django.emit("partition.added", {"dataset": "sales"})
    page = admin_client.get(change).content.decode()
    assert "count 1 of 2 partition.added" in page and "No firing yet." in page
    assert "none: it fires on events" in page  # no calendar of ticks
    event = scylla_django.emit("partition.added", {"dataset": "sales"})
    [fired] = fire()
    page = admin_client.get(change).content.decode()
    assert fired.rn in page and f"partition.added #{event.pk}" in page
    assert "count 0 of 2 partition.added" in page
    assert "on partition.added" in admin_client.get(CHANGELIST).content.decode()
