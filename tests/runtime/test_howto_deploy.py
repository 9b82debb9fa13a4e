"""docs/howto/deploy.md runs as written: its example block (read from the page, the ```python
block that starts with `# deploy example`) upgrades a stored spec under the new handler, and
the checks the page lists exist with the levels it gives them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.checks import run_checks

from scylla_django import spec_versions
from scylla_django.models import Task

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "deploy.md"
BLOCK = re.compile(r"```python\n(# deploy example:.*?)```", re.DOTALL)
CHECK_ROW = re.compile(r"^\| `(scylla_django\.[EW]\d{3})` \| (error|warning) \|", re.MULTILINE)


def example() -> str:
    match = BLOCK.search(PAGE.read_text())
    assert match is not None, "docs/howto/deploy.md has no deploy example block"
    return match.group(1)


@pytest.fixture
def statements() -> Iterator[None]:
    yield
    spec_versions.unregister("statements")


def test_the_deploy_example_runs_as_written(statements):
    spec_versions.unregister("statements")  # the queue as yesterday's code had it
    exec(compile(example(), str(PAGE), "exec"), {})
    assert Task.objects.filter(queue="statements", version=2).count() == 2

    # A task of yesterday's shape that the migration cannot upgrade (no customer) is named by
    # check --deploy; the example's own tasks are not.
    broken = Task.objects.submit("statements", {"amount": 1})
    Task.objects.filter(rn=broken.rn).update(version=None)
    messages = [
        m
        for m in run_checks(include_deployment_checks=True, databases=["default"])
        if m.id == "scylla_django.E053"
    ]
    [message] = messages
    assert broken.rn in message.msg and "KeyError('customer')" in message.msg
    for rn in Task.objects.exclude(rn=broken.rn).values_list("rn", flat=True):
        assert rn not in message.msg


def test_the_checks_the_page_lists_have_the_levels_it_gives():
    rows = dict(CHECK_ROW.findall(PAGE.read_text()))
    assert set(rows) == {
        "scylla_django.W052",
        "scylla_django.E053",
        "scylla_django.E054",
        "scylla_django.W055",
    }
    for check_id, level in rows.items():
        assert check_id.split(".")[1][0] == {"error": "E", "warning": "W"}[level]
