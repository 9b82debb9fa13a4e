"""The admin and unique keys: filter and search tasks by key, the key on the task page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from scylla_django.models import Task

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

LIST = reverse("admin:scylla_django_task_changelist")


@pytest.fixture
def keyed() -> dict[str, Task]:
    return {
        "a": Task.objects.submit("q", {}, rn="a", unique_key="invoice:7"),
        "b": Task.objects.submit("q", {}, rn="b", unique_key="invoice:8"),
        "c": Task.objects.submit("q", {}, rn="c"),
    }


def listed(response) -> set[str]:
    assert response.status_code == 200, response.status_code
    return {task.rn for task in response.context["cl"].result_list}


def test_filter_by_key(admin_client, keyed):
    assert listed(admin_client.get(LIST, {"unique_key": "invoice:7"})) == {"a"}
    assert listed(admin_client.get(LIST, {"unique_key": "none"})) == set()


def test_search_by_key(admin_client, keyed):
    assert listed(admin_client.get(LIST, {"q": "invoice:8"})) == {"b"}
    assert listed(admin_client.get(LIST, {"q": "c"})) == {"c"}


def test_a_bad_key_in_the_filter_is_a_bad_lookup_not_an_error(admin_client, keyed):
    response = admin_client.get(LIST, {"unique_key": "x" * 201})
    assert response.status_code in (200, 302)


def test_the_task_page_shows_the_key_and_its_window(admin_client):
    task = Task.objects.submit(
        "q", {}, rn="w", unique_key="report:2026", unique_window=timedelta(hours=1)
    )
    page = admin_client.get(reverse("admin:scylla_django_task_change", args=[task.pk]))
    assert page.status_code == 200
    content = page.content.decode()
    assert "report:2026" in content and "?unique_key=report%3A2026" in content
    assert "unique window" in content.lower()
