"""Unique keys under real concurrency: many processes submit one key at the same moment."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection

from scylla_django.models import Task
from tests.processes import ROOT, child_env, signal_each

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
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(PROCESSES)]
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.unique_child", "invoice:7", str(flag), str(go)],
            cwd=ROOT,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flag in ready
    ]
    try:
        give_up = time.monotonic() + 120
        while not all(flag.exists() for flag in ready):
            assert all(child.poll() is None for child in children), "a child died early"
            assert time.monotonic() < give_up, "the children did not get ready"
            time.sleep(0.01)
        go.touch()
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        signal_each([child.pid for child in children if child.poll() is None], 9)
        for child in children:
            child.wait()
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
    reports = [json.loads(out) for out, _ in outputs]

    tasks = list(Task.objects.filter(unique_key="invoice:7").values_list("rn", flat=True))
    assert len(tasks) == 1, tasks
    assert {report["rn"] for report in reports} == {tasks[0]}
    assert Counter(report["outcome"] for report in reports) == {
        "inserted": 1,
        "duplicate": PROCESSES - 1,
    }
