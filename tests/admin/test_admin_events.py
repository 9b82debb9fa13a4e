"""The event admin: the stored events, newest first, read-only, filtered by kind, time and
consumption, with the schedules whose firings consumed each."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.urls import reverse

import scylla_django
from scylla_django.models import Event, Schedule
from scylla_django.schedules.firings import fire
from tests.helpers import staff

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:scylla_django_event_changelist")


def shown(client, query: str = "") -> str:
    response = client.get(CHANGELIST + query)
    assert response.status_code == 200, response.content.decode()[:2000]
    return response.content.decode()


def test_the_list_shows_events_newest_first_with_their_consumers(admin_client):
    schedule = Schedule.objects.create(name="loader", queue="q", trigger={"on_event": "first"})
    first = scylla_django.emit("first", {})
    fire()
    second = scylla_django.emit("second", {})
    page = shown(admin_client)
    assert page.index(f"second #{second.pk}") < page.index(f"first #{first.pk}")
    link = reverse("admin:scylla_django_schedule_change", args=[schedule.pk])
    assert f'<a href="{link}">loader</a>' in page


def test_the_filters(admin_client):
    Schedule.objects.create(name="loader", queue="q", trigger={"on_event": "first"})
    first = scylla_django.emit("first", {})
    fire()
    second = scylla_django.emit("second", {})
    at = Event.objects.get(pk=second.pk).time
    Event.objects.filter(pk=first.pk).update(time=at - timedelta(days=3))
    since = urlencode({"time__gte": (at - timedelta(days=1)).isoformat()})
    for query, present, absent in [
        ("?kind=second", second, first),
        ("?consumed=yes", first, second),
        ("?consumed=no", second, first),
        (f"?{since}", second, first),
    ]:
        page = shown(admin_client, query)
        assert f"#{present.pk}<" in page and f"#{absent.pk}<" not in page, query


def test_a_bad_kind_is_refused_as_a_bad_lookup(admin_client):
    response = admin_client.get(CHANGELIST + "?kind=has%20space")
    assert response.status_code == 302 and "e=1" in response["Location"]


def test_events_are_read_only(admin_client):
    event = scylla_django.emit("partition.added", {"dataset": "sales"})
    change = reverse("admin:scylla_django_event_change", args=[event.pk])
    page = admin_client.get(change).content.decode()
    assert "sales" in page and 'name="_save"' not in page
    assert admin_client.get(reverse("admin:scylla_django_event_add")).status_code == 403
    assert admin_client.post(change, {"kind": "changed"}).status_code == 403
    delete = reverse("admin:scylla_django_event_delete", args=[event.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert "delete_selected" not in shown(admin_client)
    assert Event.objects.get(pk=event.pk).kind == "partition.added"


def test_the_list_needs_the_view_permission():
    assert staff().get(CHANGELIST).status_code == 403
    assert staff("view_event").get(CHANGELIST).status_code == 200
