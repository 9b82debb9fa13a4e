"""The example of docs/howto/fairness.md runs as written, and does what its comments say.

The block is read from the page itself (the ```python block that starts with
`# fair shares`), so the page cannot drift from what works."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from pathlib import Path

import pytest

from scylla_django.models import Key, Limit, Rate, Task
from tests.factories import WorkerFactory

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "fairness.md"
BLOCK = re.compile(r"```python\n(# fair shares: (SCYLLA = .*?)\n.*?)```", re.DOTALL)


def test_the_fairness_howto_example_does_what_it_says(settings) -> None:
    match = BLOCK.search(PAGE.read_text())
    assert match is not None, "docs/howto/fairness.md has no example block"
    settings.SCYLLA = ast.literal_eval(match.group(2).removeprefix("SCYLLA = "))
    exec(compile(match.group(1), str(PAGE), "exec"), {})
    worker = WorkerFactory()
    leased = Task.objects.lease(worker, ["reports"], limit=2, lease_length=timedelta(seconds=30))
    # initech's one task is not behind globex's 1,000: the first two leases are one of each
    # (globex's limit of 2 would allow both to be its own).
    assert sorted(t.fair_key for t in leased) == ["globex", "initech"]
    assert Limit.objects.get(name="tenant:globex").max_running == 2
    assert Rate.objects.get(name="api:globex").count == 60
    [summary] = Task.objects.lease(worker, ["summaries"], limit=1, lease_length=30)
    assert summary.rate_cost == 800
    # The task's 800 starts and the request's 150 share the window of 1,000.
    assert len(Key.objects.get(name="R:openai").starts) == 950
