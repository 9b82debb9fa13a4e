"""`POST /bulk/tasks/cancel/`: cancel a selection (the list's filters, or rns) in one request."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from tests.factories import running_task
from tests.helpers import (
    assert_error,
    assert_field_error,
    client_for,
    make_user,
    post,
    worker_of,
)

pytestmark = pytest.mark.django_db

N = 2500


@pytest.fixture
def canceller():
    return make_user("canceller", "view_task", "cancel_task", "work_task")


@pytest.fixture
def canceller_api(canceller):
    return client_for(canceller)


def submit(queue: str, n: int) -> list[str]:
    outcomes = Task.objects.submit_many({"queue": queue, "spec": {"i": i}} for i in range(n))
    return [outcome.rn for outcome in outcomes if outcome.rn is not None]


def test_a_filter_cancels_2500_tasks_in_one_request_and_one_transaction(canceller_api, canceller):
    submit("bulk", N)
    worker = worker_of(canceller, ("bulk",))
    running = Task.objects.lease(worker, ["bulk"], limit=10)
    done = running_task(worker, queue="done-elsewhere")
    running[0].complete(worker)
    submit("other", 3)
    with CaptureQueriesContext(connection) as queries:
        response = post(canceller_api, "/bulk/tasks/cancel/", {"filter": {"queue": "bulk"}})
    assert response.status_code == 200, response.content
    assert response.json() == {"cancelled": N - 1, "skipped": 1, "not_found": 0}
    assert len(queries) < 40  # not one round trip per task
    assert Task.objects.filter(queue="bulk", status=Status.CANCELLED).count() == N - 1
    assert Task.objects.filter(queue="other", status=Status.READY).count() == 3
    assert Task.objects.get(pk=done.pk).status == Status.RUNNING
    assert History.objects.filter(typ=EventType.CANCELLATION).count() == N - 1


def test_rns_cancel_those_tasks_and_count_the_unknown_ones(canceller_api):
    rns = submit("bulk", N)
    response = post(canceller_api, "/bulk/tasks/cancel/", {"rns": [*rns, "no-such-task"]})
    assert response.json() == {"cancelled": N, "skipped": 0, "not_found": 1}
    again = post(canceller_api, "/bulk/tasks/cancel/", {"rns": rns[:5]})
    assert again.json() == {"cancelled": 0, "skipped": 5, "not_found": 0}


def test_a_filter_takes_the_list_s_filters_with_json_values(canceller_api):
    submit("a", 3)
    submit("b", 2)
    Task.objects.filter(queue="a").update(priority=7)
    body = {"filter": {"status": ["ready", "running"], "priority_min": 5, "queue": "a"}}
    assert post(canceller_api, "/bulk/tasks/cancel/", body).json()["cancelled"] == 3
    assert Task.objects.filter(queue="b", status=Status.READY).count() == 2


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({}, "non_field_errors", "invalid"),
        ({"filter": {"queue": "a"}, "rns": ["x"]}, "non_field_errors", "invalid"),
        ({"filter": {}}, "filter", "blank"),
        ({"filter": {"stauts": "ready"}}, "filter.stauts", "unknown_field"),
        ({"filter": {"status": ["done"]}}, "filter.status", "invalid_choice"),
        ({"filter": {"priority_min": "x"}}, "filter.priority_min", "invalid"),
        ({"filter": {"priority_min": True}}, "filter.priority_min", "invalid"),
        ({"filter": {"queue": "-bad"}}, "filter.queue", "invalid_queue"),
        ({"rns": []}, "rns", "min_length"),
        ({"rns": [".."]}, "rns.0", "invalid_rn"),
        ({"rns": ["a"], "all": True}, "all", "unknown_field"),
    ],
)
def test_an_invalid_selection_is_400_and_cancels_nothing(canceller_api, body, field, code):
    submit("a", 2)
    assert_field_error(post(canceller_api, "/bulk/tasks/cancel/", body), field, code)
    assert not Task.objects.filter(status=Status.CANCELLED).exists()


def test_cancel_many_needs_the_cancel_permission():
    submit("a", 2)
    viewer = client_for(make_user("viewer", "view_task"))
    assert_error(post(viewer, "/bulk/tasks/cancel/", {"rns": ["x"]}), 403, "permission_denied")
    assert_error(
        post(client_for(None), "/bulk/tasks/cancel/", {"rns": ["x"]}), 401, "not_authenticated"
    )
    assert not Task.objects.filter(status=Status.CANCELLED).exists()
