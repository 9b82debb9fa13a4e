"""The examples of docs/howto/durable.md run as written and do what the page says.

Each ```python block is read from the page itself (by its first line), so the page cannot
drift from what works."""

from __future__ import annotations

import functools
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

import scylla_django
from scylla_django import pytest_plugin
from scylla_django.enums import Status
from scylla_django.handlers import HandlerRegistry
from scylla_django.models import Step, Task
from scylla_django.testing import run_task
from tests.helpers import API

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor == "mysql", reason="the virtual clock runs on PostgreSQL and SQLite"
    ),
]

scylla_clock = pytest_plugin.scylla_clock

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "durable.md"


def example(first_line: str, registry: HandlerRegistry, monkeypatch) -> dict:
    """Run the page's block that starts with `first_line`, its handlers registered in
    `registry`; return the names it defined."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    [code] = [block for block in blocks if block.startswith(first_line)]
    monkeypatch.setattr(
        scylla_django, "handler", functools.partial(scylla_django.handler, registry=registry)
    )
    names: dict = {}
    exec(compile(code, str(PAGE), "exec"), names)
    return names


def test_the_deploy_safe_import_resumes_from_its_cursor(monkeypatch):
    registry = HandlerRegistry()
    example("# durable: a deploy-safe import", registry, monkeypatch)
    task = Task.objects.submit("docs-imports", {"count": 250})
    done = run_task(task.rn, registry=registry)
    assert (done.status, done.result) == (Status.COMPLETED, {"users": 250})
    assert Step.objects.get(task=task, name="@cursor").result == 200
    # A later run (as after a stop) takes the recorded steps and starts at the cursor.
    User.objects.filter(username="user5").delete()
    Task.objects.filter(pk=task.pk).update(status=Status.READY, result=None)
    again = run_task(task.rn, registry=registry)
    assert again.result == {"users": 250}  # the report step's recorded result
    assert not User.objects.filter(username="user5").exists()  # before the cursor: not redone


def test_the_approval_flow_waits_for_its_signal_url(monkeypatch):
    registry = HandlerRegistry()
    names = example("# durable: an approval flow", registry, monkeypatch)
    task = Task.objects.submit("docs-refunds", {"order": 7})
    parked = run_task(task.rn, registry=registry)
    assert parked.status == Status.READY and parked.waiting_reasons()[0]["code"] == "waiting"
    [(order, url)] = names["APPROVALS"]
    assert order == 7
    path = url.removeprefix("https://shop.example.com/api/scylla")
    answer = APIClient().post(
        f"{API}{path}", {"payload": {"approve": True, "by": "ann"}}, format="json"
    )
    assert answer.status_code == 201, answer.content
    done = run_task(task.rn, registry=registry)
    assert (done.status, done.result) == (Status.COMPLETED, {"refunded": True, "by": "ann"})
    assert len(names["APPROVALS"]) == 1  # asked once, though the handler ran twice


def test_the_approval_flow_gives_up_after_three_days(monkeypatch, scylla_clock):
    registry = HandlerRegistry()
    example("# durable: an approval flow", registry, monkeypatch)
    task = Task.objects.submit("docs-refunds", {"order": 8})
    run_task(task.rn, registry=registry)
    scylla_clock.advance(timedelta(days=3, minutes=1))
    assert Task.objects.ready(["docs-refunds"]).filter(pk=task.pk).exists()
    done = run_task(task.rn, registry=registry)
    assert done.result == {"refunded": False, "why": "no decision within 3 days"}
