"""The admin's task page lists a task's steps, cursor, waits and signals, and says which wait a
parked task is in."""

from __future__ import annotations

from html import unescape

import pytest

from scylla_django.models import Worker
from scylla_django.models.waits import WaitFor
from tests.factories import running_task

pytestmark = pytest.mark.django_db


def test_a_parked_task_s_page_names_its_wait_and_lists_its_steps(admin_client):
    worker = Worker.objects.register(queues=["default"])
    task = running_task(worker, rn="approval")
    task.record_step(worker, "ask", {"sent": True})
    task.checkpoint(worker, {"page": 3})
    task.begin_wait(worker, WaitFor("decision", "signal", signal="approved"))
    task.signal("other", {"n": 1})
    response = admin_client.get(f"/admin/scylla_django/task/{task.pk}/change/")
    assert response.status_code == 200
    html = unescape(response.content.decode())
    assert "wait decision: signal approved" in html
    assert "<code>ask</code>" in html and "13 bytes" in html
    assert 'cursor: <code>{"page": 3}</code>' in html
    assert "<code>other</code>" in html
