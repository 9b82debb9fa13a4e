"""A task for a queue that nothing serves (a typo: "emials") is accepted, with a warning."""

from __future__ import annotations

import logging

import pytest
from django.core.management import call_command

from scylla_django.handlers import HandlerRegistry
from scylla_django.models import Worker
from scylla_django.models.serving import forget_live_worker_queues, unserved_queues
from tests.factories import TaskFactory
from tests.helpers import API, post


@pytest.fixture(autouse=True)
def fresh_worker_queues():
    """Each test reads the workers afresh: the cached read would outlive a test's rows."""
    forget_live_worker_queues()
    yield
    forget_live_worker_queues()


def test_submitting_to_a_queue_nobody_serves_warns_in_a_header_and_the_log(api, caplog):
    Worker.objects.register(queues=["emails"])
    with caplog.at_level(logging.WARNING, logger="scylla_django"):
        response = post(api, "/tasks/", {"queue": "emials", "spec": {}})
    assert response.status_code == 201
    assert "no live worker serves queue 'emials'" in response["Scylla-Warning"]
    assert "no live worker serves queue 'emials'" in caplog.text


def test_a_queue_with_a_live_worker_gets_no_warning(api):
    Worker.objects.register(queues=["emails"])
    response = post(api, "/tasks/", {"queue": "emails", "spec": {}})
    assert response.status_code == 201
    assert "Scylla-Warning" not in response


def test_a_stopped_worker_serves_nothing(api):
    Worker.objects.register(queues=["emails"]).stop()
    response = post(api, "/tasks/", {"queue": "emails", "spec": {}})
    assert "'emails'" in response["Scylla-Warning"]


def test_bulk_submission_names_each_queue_nobody_serves_once(api):
    Worker.objects.register(queues=["emails"])
    items = [
        {"queue": "emails", "spec": 1},
        {"queue": "emials", "spec": 2},
        {"queue": "emials", "spec": 3},
        {"queue": "sms", "spec": 4},
    ]
    response = post(api, "/bulk/tasks/", items)
    assert response.status_code == 200
    warning = response["Scylla-Warning"]
    assert warning.count("'emials'") == 1 and "'sms'" in warning and "'emails'" not in warning


def test_a_handler_registered_in_this_process_serves_its_queue(db):
    registry = HandlerRegistry()
    registry.register("reports", lambda ctx: None)
    assert unserved_queues(["reports", "emials"], served=registry.serves) == ["emials"]


def test_live_workers_are_read_at_most_once_within_the_cache_age(db, django_assert_num_queries):
    with django_assert_num_queries(1):
        for _ in range(3):
            assert unserved_queues(["emials"], served=HandlerRegistry().serves) == ["emials"]


def test_queues_lists_no_live_worker_for_queues_with_ready_tasks(api):
    Worker.objects.register(queues=["emails"])
    TaskFactory(queue="emails")
    TaskFactory(queue="emials")
    by_queue = {entry["queue"]: entry for entry in api.get(f"{API}/queues/").json()}
    assert by_queue["emails"]["warnings"] == []
    assert by_queue["emials"]["warnings"] == ["no live worker serves this queue"]


def test_the_served_health_check_warns_without_failing(db):
    import io

    Worker.objects.register(queues=["emails"])
    TaskFactory(queue="emials")
    out = io.StringIO()
    call_command("scylla_health", "--served", stdout=out, stderr=out)  # exit status 0
    assert "WARN served: no live worker serves emials (1 ready task)" in out.getvalue()
