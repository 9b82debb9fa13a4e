"""A task's run-time limit over the API: `timeout` in the submit body, in the task shown."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scylla_django.models import Task
from tests.helpers import API, assert_field_error, post

pytestmark = pytest.mark.django_db


def test_a_submitted_timeout_is_stored_and_shown(api):
    response = post(api, "/tasks/", {"queue": "q", "spec": 1, "timeout": "5m"})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["timeout"] == 300.0
    assert Task.objects.get(rn=body["rn"]).timeout == timedelta(minutes=5)
    assert api.get(f"{API}/tasks/{body['rn']}/").json()["timeout"] == 300.0


def test_a_task_without_a_timeout_shows_null(api):
    body = post(api, "/tasks/", {"queue": "q", "spec": 1}).json()
    assert body["timeout"] is None


@pytest.mark.parametrize("timeout", [0, -5, "0s", "soon", True])
def test_a_zero_negative_or_malformed_timeout_is_a_400(api, timeout):
    response = post(api, "/tasks/", {"queue": "q", "spec": 1, "timeout": timeout})
    assert_field_error(response, "timeout", "invalid_timeout")
    assert not Task.objects.exists()


def test_bulk_items_take_a_timeout(api):
    items = [{"queue": "q", "spec": 1, "timeout": 2.5}, {"queue": "q", "spec": 2, "timeout": -1}]
    outcomes = post(api, "/bulk/tasks/", items).json()
    assert [o["outcome"] for o in outcomes] == ["inserted", "invalid"]
    assert Task.objects.get(rn=outcomes[0]["rn"]).timeout == timedelta(seconds=2.5)
    assert outcomes[1]["errors"]["timeout"][0]["code"] == "invalid_timeout"
