"""The keyed-coordination block of docs/howto/keys.md runs as written, and does what its
comments say.

The block is read from the page itself (the ```python block that starts with
`# keyed coordination`), so the page cannot drift from what works."""

from __future__ import annotations

import ast
import re
from datetime import timedelta

import pytest

from scylla_django.models import Task
from tests.docs import page
from tests.factories import WorkerFactory

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

PAGE = page("howto/keys.md")
BLOCK = re.compile(r"```python\n(# keyed coordination: (SCYLLA = .*?)\n.*?)```", re.DOTALL)


def documented_block() -> tuple[str, dict[str, object]]:
    match = BLOCK.search(PAGE.read_text())
    assert match is not None, f"{PAGE} has no keyed coordination block"
    scylla: dict[str, object] = ast.literal_eval(match.group(2).removeprefix("SCYLLA = "))
    return match.group(1), scylla


def lease(queue: str) -> list[object]:
    worker = WorkerFactory()
    leased = Task.objects.lease(worker, [queue], limit=5, lease_length=timedelta(seconds=30))
    return [t.spec for t in leased]


def test_the_documented_keyed_coordination_block_does_what_it_says(settings) -> None:
    code, scylla = documented_block()
    settings.SCYLLA = scylla
    exec(compile(code, str(PAGE), "exec"), {})
    assert Task.objects.filter(queue="invoices").count() == 1
    # The exclusive holder of "ledger" and its reader never run together.
    assert lease("books") == [{"post": 1}]
    assert lease("books") == []
    assert lease("payments") == [{"charge": 1}]
    assert lease("orders") == [{"step": 1}]
    assert lease("mail") == [{"to": "ada@example.com"}]
