"""Unique keys under real concurrency: many processes submit one key at the same moment."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from django.db import connection

from scylla_django.models import Task
from tests.processes import reports, start_together

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.django_db(transaction=True),
]

PROCESSES = 50


def test_concurrent_submits_of_one_key_create_exactly_one_task(tmp_path: Path) -> None:
    """50 processes submit the key "invoice:7" at once with `on_conflict="return"`: one task
    is created, and every process gets its rn back (one of them as "inserted")."""
    assert not connection.in_atomic_block  # autocommit: the children see each other's commits
    children = start_together(tmp_path, PROCESSES, "tests.unique_child", "invoice:7")
    outcomes = reports(children)

    tasks = list(Task.objects.filter(unique_key="invoice:7").values_list("rn", flat=True))
    assert len(tasks) == 1, tasks
    assert {report["rn"] for report in outcomes} == {tasks[0]}
    assert Counter(report["outcome"] for report in outcomes) == {
        "inserted": 1,
        "duplicate": PROCESSES - 1,
    }
