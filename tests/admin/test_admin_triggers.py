"""The schedule admin for triggers: add one with the settings' validation, see what is unmet
and the latest firings with the events they consumed."""

from __future__ import annotations

import pytest
from django.urls import reverse

import scylla_django
from scylla_django.models import Firing, Schedule
from scylla_django.schedules.firings import fire

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


def test_a_change_of_the_trigger_in_the_admin_counts_from_the_change(admin_client):
    trigger = '{"on_event": "partition.added", "count": 3}'
    admin_client.post(ADD, {**FORM, "name": "t", "trigger": trigger, "enabled": "on"})
    schedule = Schedule.objects.get(name="t")
    change = reverse("admin:scylla_django_schedule_change", args=[schedule.pk])
    events = [scylla_django.emit("partition.added", {}) for _ in range(2)]
    page = admin_client.get(change).content.decode()
    assert f"after event #{schedule.counts_after}," in page
    response = admin_client.post(  # the queue only: the watermark stays
        change, {**FORM, "name": "t", "trigger": trigger, "queue": "other", "enabled": "on"}
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Schedule.objects.get(pk=schedule.pk).counts_after == schedule.counts_after
    two = '{"on_event": "partition.added", "count": 2}'
    response = admin_client.post(change, {**FORM, "name": "t", "trigger": two, "enabled": "on"})
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Schedule.objects.get(pk=schedule.pk).counts_after == events[-1].pk
    assert fire() == []  # the two events came before the change
    assert f"after event #{events[-1].pk}," in admin_client.get(change).content.decode()


def test_the_page_shows_a_delayed_firing_and_deleting_drops_it(admin_client):
    schedule = Schedule.objects.create(
        name="later", queue="q", trigger={"on_event": "partition.added", "delay": "10m"}
    )
    change = reverse("admin:scylla_django_schedule_change", args=[schedule.pk])
    scylla_django.emit("partition.added", {})
    [fired] = fire()
    due = Firing.objects.get().due
    page = admin_client.get(change).content.decode()
    assert fired.rn in page and "Waiting for its trigger&#x27;s delay" in page
    assert f"{due:%Y-%m-%d %H:%M:%S} UTC" in page
    delete = reverse("admin:scylla_django_schedule_delete", args=[schedule.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not Schedule.objects.exists() and not Firing.objects.exists()
    Schedule.objects.create(name="other", queue="q", trigger={"on_event": "x", "delay": "1m"})
    scylla_django.emit("x", {})
    fire()
    response = admin_client.post(
        CHANGELIST,
        {
            "action": "delete_selected",
            "_selected_action": list(Schedule.objects.values_list("pk", flat=True)),
            "post": "yes",
        },
    )
    assert response.status_code == 302
    assert not Schedule.objects.exists() and not Firing.objects.exists()


@pytest.mark.parametrize(
    ("trigger", "message"),
    [
        ('{"on_event": "x", "delay": "-5m"}', "delay must be a positive duration"),
        ('{"on_event": "x", "since": "then"}', "since must be"),
    ],
)
def test_a_bad_delay_or_since_is_a_form_error(admin_client, trigger, message):
    response = admin_client.post(ADD, {**FORM, "name": "t", "trigger": trigger})
    assert response.status_code == 200 and message in response.content.decode()
    assert not Schedule.objects.exists()
