"""The handler example of docs/howto/workers.md is real code: run through the real lease
and finish, it adds up its rows with progress, and aborts with `empty` when there are none.

The block is read from the page itself (its ```python block that starts with
`# myapp/handlers.py`), so the page cannot drift from what works. It registers its handler in
a registry of the test's own, so the process's registry is left as it was."""

from __future__ import annotations

import functools
import re

import pytest

import scylla_django
from scylla_django.handlers import HandlerRegistry, handler
from scylla_django.models import Task
from scylla_django.testing import run_task
from tests.docs import page

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = page("howto/workers.md")


def workers_handler() -> str:
    match = re.search(r"```python\n(# myapp/handlers\.py\n.*?)```", PAGE.read_text(), re.DOTALL)
    assert match is not None, f"{PAGE} lost its handler example"
    return match.group(1)


@pytest.fixture
def registry(monkeypatch) -> HandlerRegistry:
    """The block's `@handler` registers here (`from scylla_django import handler` reads the
    package's attribute when the block runs)."""
    own = HandlerRegistry()
    monkeypatch.setattr(scylla_django, "handler", functools.partial(handler, registry=own))
    exec(compile(workers_handler(), str(PAGE), "exec"), {"__name__": "myapp.handlers"})
    assert own.queues() == ["totals"]
    return own


def test_the_documented_handler_adds_up_its_rows_with_progress(registry):
    spec = {"day": "2025-03-01", "rows": [{"amount": 5}, {"amount": 7}, {"amount": 30}]}
    task = Task.objects.submit("totals", spec)
    done = run_task(task.rn, registry=registry)
    assert (done.status, done.result, done.progress) == ("completed", {"rows": 3, "total": 42}, 1)


def test_the_documented_handler_aborts_with_empty_when_there_are_no_rows(registry):
    task = Task.objects.submit("totals", {"day": "2025-03-02", "rows": []})
    done = run_task(task.rn, registry=registry)
    assert done.status == "aborted"
    [error] = done.errors
    assert (error["code"], error["args"]) == ("empty", {"day": "2025-03-02"})
