"""The README's keyed-coordination block runs as written, and does what its comments say.

The block is read from README.md itself (the ```python block that starts with
`# keyed coordination`), so the README cannot drift from what works."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from pathlib import Path

import pytest

from scylla_django.models import Task
from tests.factories import WorkerFactory

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"```python\n(# keyed coordination: (SCYLLA = .*?)\n.*?)```", re.DOTALL)


def readme_block() -> tuple[str, dict[str, object]]:
    match = BLOCK.search(README.read_text())
    assert match is not None, "README.md has no keyed coordination block"
    scylla: dict[str, object] = ast.literal_eval(match.group(2).removeprefix("SCYLLA = "))
    return match.group(1), scylla


def lease(queue: str) -> list[object]:
    worker = WorkerFactory()
    leased = Task.objects.lease(worker, [queue], limit=5, lease_length=timedelta(seconds=30))
    return [t.spec for t in leased]


def test_the_readme_keyed_coordination_block_does_what_it_says(settings) -> None:
    code, scylla = readme_block()
    settings.SCYLLA = scylla
    exec(compile(code, "README.md", "exec"), {})
    assert Task.objects.filter(queue="invoices").count() == 1
    # The exclusive holder of "ledger" and its reader never run together.
    assert lease("books") == [{"post": 1}]
    assert lease("books") == []
    assert lease("payments") == [{"charge": 1}]
    assert lease("orders") == [{"step": 1}]
    assert lease("mail") == [{"to": "ada@example.com"}]
