"""The examples of docs/howto/control.md run as written and do what the page says: each
```python block is read from the page itself, so the page cannot drift from what works."""

from __future__ import annotations

import ast
import functools
import re
from datetime import timedelta
from pathlib import Path

import pytest

import scylla_django
from scylla_django import handlers, worker
from scylla_django.schedules import clean_definition

pytestmark = pytest.mark.django_db

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "control.md"


def block(first_line: str) -> str:
    """The ```python block of the page that starts with `first_line`."""
    pattern = rf"```python\n({re.escape(first_line)}\n.*?)```"
    match = re.search(pattern, PAGE.read_text(), re.DOTALL)
    assert match is not None, f"{PAGE.name} has no block starting {first_line!r}"
    return match.group(1)


def run(code: str) -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(compile(code, str(PAGE), "exec"), namespace)
    return namespace


def test_pause_and_resume():
    run(block("# pause and resume"))


def test_delete_a_ready_task():
    run(block("# delete a ready task"))


def test_cpu_limit(monkeypatch):
    registry = handlers.HandlerRegistry()
    monkeypatch.setattr(
        scylla_django, "handler", functools.partial(handlers.handler, registry=registry)
    )
    run(block("# cpu limit"))
    assert registry.cpu_limit_of("thumbnails") == timedelta(seconds=30)


def test_max_load(monkeypatch):
    registry = handlers.HandlerRegistry()
    registry.register("reports", lambda ctx: None)
    options = functools.partial(worker.WorkerOptions, registry=registry)
    monkeypatch.setattr(worker, "WorkerOptions", options)
    namespace = run(block("# max load"))
    assert namespace["options"].load_reader() == 1.0


def test_the_schedule_with_max_load_is_valid():
    text = PAGE.read_text()
    match = re.search(r"```python\n(SCYLLA = \{.*?\})\n```", text, re.DOTALL)
    assert match is not None
    scylla = ast.literal_eval(match.group(1).removeprefix("SCYLLA = "))
    for name, raw in scylla["SCHEDULES"].items():
        assert clean_definition(name, raw).fields()["max_load"] == 4.0
