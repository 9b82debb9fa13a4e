"""A task submitted from Python to a queue that nothing serves is accepted, and logged."""

from __future__ import annotations

import logging

import pytest

from scylla_django.handlers import registry
from scylla_django.models import Task, Worker
from scylla_django.models.serving import forget_live_worker_queues

WARNING = "no live worker serves queue 'emials'"


@pytest.fixture(autouse=True)
def fresh_worker_queues():
    """Each test reads the workers afresh and logs afresh: the caches would outlive a test."""
    forget_live_worker_queues()
    yield
    forget_live_worker_queues()


def test_a_python_submission_to_a_queue_nobody_serves_is_kept_and_logged(db, caplog):
    Worker.objects.register(queues=["emails"])
    with caplog.at_level(logging.WARNING, logger="scylla_django"):
        task = Task.objects.submit("emials", {})
    assert Task.objects.get(rn=task.rn).status == "ready"
    assert WARNING in caplog.text


def test_the_warning_is_logged_once_a_minute_per_queue(db, caplog):
    with caplog.at_level(logging.WARNING, logger="scylla_django"):
        for _ in range(3):
            Task.objects.submit("emials", {})
        Task.objects.submit_many([{"queue": "emials", "spec": 1}, {"queue": "sms", "spec": 2}])
    assert caplog.text.count(WARNING) == 1
    assert caplog.text.count("queue 'sms'") == 1


def test_a_queue_with_a_live_worker_or_a_handler_here_is_not_logged(db, caplog, monkeypatch):
    Worker.objects.register(queues=["emails"])
    monkeypatch.setitem(registry._handlers, "reports-served-here", lambda ctx: None)
    with caplog.at_level(logging.WARNING, logger="scylla_django"):
        Task.objects.submit("emails", {})
        Task.objects.submit_many([{"queue": "reports-served-here", "spec": 1}])
    assert "no live worker" not in caplog.text
