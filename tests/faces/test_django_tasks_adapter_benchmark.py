"""`benchmarks/django_tasks_adapter.py`, run for real on a SQLite file of its own: it enqueues
and leases its tasks, and prints the client CPU per task of each way it runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import django
import pytest
from django.conf import settings

from tests.processes import ROOT

pytestmark = [
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is new in Django 6.0"),
    pytest.mark.skipif(
        "sqlite" not in settings.DATABASES["default"]["ENGINE"],
        reason="the script runs on a SQLite file of its own: once, in the SQLite cell",
    ),
]


def test_the_adapter_benchmark_prints_each_cost_per_task(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'bench.sqlite3'}"}
    done = subprocess.run(
        [sys.executable, "benchmarks/django_tasks_adapter.py", "--tasks", "50", "--runs", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "sqlite, Django" in done.stdout and "50 leased tasks" in done.stdout
    figures = dict(re.findall(r"^(.+?)\s+(\d+\.\d) µs$", done.stdout, re.MULTILINE))
    assert list(figures) == [
        "native: handler call + task_finished receiver",
        "django.tasks: run_django_task + task_finished",
        "  without Django log receivers",
        "  of which Django log receivers",
    ]
    assert float(figures["django.tasks: run_django_task + task_finished"]) > 0
