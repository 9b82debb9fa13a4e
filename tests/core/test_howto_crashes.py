"""The example of docs/howto/crashes.md runs as written, and does what its comments say.

The block is read from the page itself (the ```python block that starts with `# what a crash
costs`), so the page cannot drift from what works."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest
from django.db import connection

from scylla_django.enums import Status
from scylla_django.models import Task

# The virtual clock makes the test's connection again: a transactional test.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor == "mysql", reason="the virtual clock runs on PostgreSQL and SQLite"
    ),
]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "crashes.md"
BLOCK = re.compile(r"```python\n(# what a crash costs \(SCYLLA = (.*?)\)\n.*?)```", re.DOTALL)


def test_the_crashes_example_does_what_it_says(settings) -> None:
    match = BLOCK.search(PAGE.read_text())
    assert match is not None, "docs/howto/crashes.md has no example block"
    settings.SCYLLA = ast.literal_eval(match.group(2))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(match.group(1), str(PAGE), "exec"), {})
    assert printed.getvalue().splitlines() == ["aborted max_leases_exceeded", "ready 3"]
    pill, beside = Task.objects.get(rn="pill"), Task.objects.get(rn="beside")
    assert (pill.status, pill.leases, pill.unstarted) == (Status.ABORTED, 3, 1)
    assert (beside.status, beside.leases, beside.unstarted) == (Status.READY, 3, 3)
