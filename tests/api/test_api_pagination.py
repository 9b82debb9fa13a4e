"""`GET /tasks/`: every filter, every ordering, and cursors that never skip or repeat a task."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.db.models.functions import Now
from rest_framework.test import APIClient

from scylla_django.api.pagination import ORDERINGS
from scylla_django.models import Task
from tests.factories import TaskFactory, running_task
from tests.helpers import API, assert_error

pytestmark = pytest.mark.django_db


def rns(api: APIClient, query: str = "") -> list[str]:
    response = api.get(f"{API}/tasks/?{query}")
    assert response.status_code == 200, response.content
    return [task["rn"] for task in response.json()["results"]]


def follow(api: APIClient, url: str | None) -> tuple[list[str], str | None, str | None]:
    """One page from a `next`/`previous` link: its rns and its own links."""
    assert url is not None
    parts = urlsplit(url)
    body = api.get(f"{parts.path}?{parts.query}").json()
    return [task["rn"] for task in body["results"]], body["next"], body["previous"]


@pytest.fixture
def mixed(worker) -> list[Task]:
    """Twelve tasks with many ties: three priorities, two queues, four statuses.

    `submit_many` inserts them in one statement, so they may share `created` too. The lease
    takes t05 and t11 (priority 2) and t01 (1) from queue qa; t05 completes, t00 is cancelled.
    """
    Task.objects.submit_many(
        {"rn": f"t{n:02d}", "queue": "qa" if n % 2 else "qb", "spec": n, "priority": n % 3}
        for n in range(12)
    )
    tasks = list(Task.objects.order_by("id"))
    leased = Task.objects.lease(worker, ["qa"], limit=3)
    leased[0].complete(worker)
    tasks[0].cancel()
    return tasks


def expected_order(ordering: str) -> list[str]:
    field = ordering.lstrip("-")
    rows = sorted(Task.objects.values_list(field, "id", "rn"), reverse=ordering.startswith("-"))
    return [rn for _, _, rn in rows]


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_paging_forwards_then_backwards_visits_every_task_once_in_order(api, mixed, ordering):
    first = api.get(f"{API}/tasks/?ordering={ordering}&page_size=5").json()
    assert first["previous"] is None
    pages = [[task["rn"] for task in first["results"]]]
    next_url = first["next"]
    while next_url:
        page, next_url, previous_url = follow(api, next_url)
        pages.append(page)
        assert len(pages) <= 3, f"the cursor went round in circles: {pages}"
    assert [len(page) for page in pages] == [5, 5, 2]
    assert [rn for page in pages for rn in page] == expected_order(ordering)

    backwards = [pages[-1]]
    while previous_url:
        page, _, previous_url = follow(api, previous_url)
        backwards.append(page)
        assert len(backwards) <= 3, f"the cursor went round in circles: {backwards}"
    assert backwards[::-1] == pages


def test_the_default_order_is_newest_first(api, mixed):
    Task.objects.filter(rn="t05").update(created=Now() + timedelta(seconds=5))
    assert rns(api)[0] == "t05"
    assert rns(api) == expected_order("-created")


def test_a_task_inserted_meanwhile_does_not_shift_the_pages(api, mixed):
    first = api.get(f"{API}/tasks/?ordering=rn&page_size=4").json()
    TaskFactory(rn="t00a")  # sorts into the first page, already seen
    page, _, _ = follow(api, first["next"])
    assert page == ["t04", "t05", "t06", "t07"]


def test_a_cursor_belongs_to_its_ordering(api, mixed):
    next_url = api.get(f"{API}/tasks/?ordering=priority&page_size=2").json()["next"]
    cursor = next_url.split("cursor=")[1].split("&")[0]
    response = api.get(f"{API}/tasks/?ordering=-priority&cursor={cursor}")
    assert_error(response, 404, "invalid_cursor")


def test_page_size_defaults_to_50_and_is_capped_at_500(api):
    Task.objects.submit_many({"queue": "q", "spec": n} for n in range(501))
    assert len(rns(api)) == 50
    assert len(rns(api, "page_size=3")) == 3
    assert len(rns(api, "page_size=100000")) == 500
    assert len(rns(api, "page_size=" + "9" * 40)) == 500


def test_filter_by_status_queue_owner_and_rn(api, mixed, worker):
    assert set(rns(api, "status=running")) == {"t01", "t11"}
    assert set(rns(api, "status=running&status=completed")) == {"t01", "t05", "t11"}
    assert set(rns(api, "status=cancelled")) == {"t00"}
    assert set(rns(api, "status=ready&queue=qa")) == {"t03", "t07", "t09"}
    assert set(rns(api, f"owner={worker.name}")) == {"t01", "t05", "t11"}
    assert rns(api, "rn=t04") == ["t04"]
    assert rns(api, "queue=nope") == []


def test_filter_by_priority_range(api, mixed):
    assert set(rns(api, "priority_min=2")) == {f"t{n:02d}" for n in range(2, 12, 3)}
    assert set(rns(api, "priority_min=1&priority_max=1")) == {f"t{n:02d}" for n in range(1, 12, 3)}
    assert rns(api, "priority_min=2&priority_max=1") == []


def test_filter_by_created_and_updated_ranges(api, worker):
    old = TaskFactory(rn="old")
    Task.objects.filter(pk=old.pk).update(
        created=Now() - timedelta(days=2), updated=Now() - timedelta(days=2)
    )
    TaskFactory(rn="new")
    running_task(worker, rn="touched", queue="other")
    Task.objects.filter(rn="touched").update(created=Now() - timedelta(days=2))
    since = api.get(f"{API}/tasks/new/").json()["created"]
    day_ago = (Task.objects.get(rn="new").created - timedelta(days=1)).isoformat()
    assert set(rns(api, f"created_after={since.replace('+', '%2B')}")) == {"new"}
    assert set(rns(api, f"created_before={day_ago.replace('+', '%2B')}")) == {"old", "touched"}
    assert set(rns(api, f"updated_after={day_ago.replace('+', '%2B')}")) == {"new", "touched"}
    assert set(rns(api, f"updated_before={day_ago.replace('+', '%2B')}")) == {"old"}
