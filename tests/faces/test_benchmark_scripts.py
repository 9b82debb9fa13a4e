"""Benchmark scripts run for real, small: each sets up what it measures and prints every
figure it names. The figures themselves are docs/discussions/performance.md's (no timing is
asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import django
import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests import private_postgres
from tests.processes import ROOT, database_url

ENGINE = settings.DATABASES["default"]["ENGINE"]


def run(script: str, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_on_scratch(script: str, suffix: str, *args: str) -> str:
    """`run()` a PostgreSQL benchmark on a database of its own (the test database's name and
    `suffix`), which the script creates and this drops afterwards."""
    name = f"{connection.settings_dict['NAME']}_{suffix}"
    server = database_url().rsplit("/", 1)[0]
    try:
        return run(script, {"DATABASE_URL": f"{server}/{name}"}, *args)
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is new in Django 6.0")
@pytest.mark.skipif(
    "sqlite" not in ENGINE, reason="the script runs on a SQLite file of its own: once, there"
)
def test_the_django_tasks_adapter_benchmark_prints_each_cost_per_task(tmp_path):
    out = run(
        "django_tasks_adapter.py",
        {"DATABASE_URL": f"sqlite:///{tmp_path / 'bench.sqlite3'}"},
        *("--tasks", "50", "--runs", "1"),
    )
    assert "sqlite, Django" in out and "50 leased tasks" in out
    figures = dict(re.findall(r"^(.+?)\s+(\d+\.\d) µs$", out, re.MULTILINE))
    assert list(figures) == [
        "native: handler call + task_finished receiver",
        "django.tasks: run_django_task + task_finished",
        "  without Django log receivers",
        "  of which Django log receivers",
    ]
    assert float(figures["django.tasks: run_django_task + task_finished"]) > 0


@pytest.mark.skipif("postgresql" not in ENGINE, reason="a PostgreSQL benchmark")
@pytest.mark.skipif(django.VERSION < (6, 0), reason="run once, in the Django 6.1 cell")
def test_the_driver_benchmark_sends_the_statement_every_way_beside_pgbench():
    out = run_on_scratch(
        "driver_paths.py", "driver", "--statements", "40", "--rows", "3", "--samples", "1"
    )
    assert "40 statements per run, 3 tasks read by each" in out
    ways = re.findall(r"^(.+?)\s+[\d,]+ \[[\d,]+-[\d,]+\] statements/s", out, re.MULTILINE)
    assert ways == [
        "the worker's cursor (Django's connection)",
        "psycopg",
        "psycopg async, one at a time",
        "psycopg async, pipelined (8 in flight)",
        "pgbench, prepared, 1 client",
    ]


@pytest.mark.skipif("postgresql" not in ENGINE, reason="a PostgreSQL benchmark")
@pytest.mark.skipif(django.VERSION < (6, 0), reason="run once, in the Django 6.1 cell")
def test_the_submit_benchmark_prints_submit_beside_the_one_row_insert_every_way():
    out = run_on_scratch(
        "submit.py", "submit", "--tasks", "30", "--bulk", "200", "--batch", "100", "--samples", "1"
    )
    floor = re.search(
        r"^one-row INSERT, one per call: pgbench [\d,]+/s; psycopg [\d,]+/s \(ratio [\d.]+\); "
        r"Django's cursor [\d,]+/s \(ratio [\d.]+\); submit\(\) [\d,]+/s \(ratio [\d.]+\)$",
        out,
        re.MULTILINE,
    )
    assert floor is not None, out
    assert re.search(r"^submit, one per call: [\d,]+ tasks/s", out, re.MULTILINE)
    assert re.search(r"^submit_many, batches of 100: [\d,]+ tasks/s", out, re.MULTILINE)


@pytest.mark.skipif("postgresql" not in ENGINE, reason="a PostgreSQL benchmark")
@pytest.mark.skipif(django.VERSION < (6, 0), reason="run once, in the Django 6.1 cell")
@pytest.mark.skipif(private_postgres.available() is not None, reason="needs a private cluster")
def test_the_pgqueuer_benchmark_runs_both_queues_beside_pgbench_and_prints_the_ratios():
    """PgQueuer is installed into .venvs/pgqueuer on first use (requirements/pgqueuer.txt);
    the private cluster takes `--synchronous-commit`."""
    script = [sys.executable, "benchmarks/beside_pgqueuer.py", "--tasks", "200", "--runs", "1"]
    done = subprocess.run(
        [*script, "--synchronous-commit", "off"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"; PgQueuer 1\.6\.0$", out, re.MULTILINE), out
    assert re.search(r"^PostgreSQL 15.* \(synchronous_commit off\), ", out, re.MULTILINE), out
    for side in ("ours, 2 workers, default options", "PgQueuer, 2 consumers, defaults"):
        assert re.search(
            rf"^{side} +[\d,]+ \[[\d,]+-[\d,]+\] tasks/s  \| pgbench lease\+complete, 2 clients: "
            r"[\d,]+ \[[\d,]+-[\d,]+\], ratio [\d.]+$",
            out,
            re.MULTILINE,
        ), out
    for figure in ("PostgreSQL CPU per task (whole server)", "commits per task"):
        for side in ("ours", "PgQueuer"):
            assert re.search(rf"^{side}: {re.escape(figure)}", out, re.MULTILINE), out
        assert re.search(rf"^ours / PgQueuer, {re.escape(figure)}.*: [\d.]+$", out, re.MULTILINE)


@pytest.mark.skipif("postgresql" not in ENGINE, reason="a PostgreSQL benchmark")
@pytest.mark.skipif(django.VERSION < (6, 0), reason="run once, in the Django 6.1 cell")
def test_the_pinned_horizon_benchmark_prints_each_phase_and_names_what_pins_it():
    out = run_on_scratch(
        "pinned_horizon.py",
        "pinned",
        *("--phase", "3", "--rate", "50", "--readers", "1", "--pgbench", "1", "--sample", "1"),
    )
    phases = re.findall(r"^(clean|pinned|after pin|readers|after readers)\s+[\d,]+\s", out, re.M)
    assert phases == ["clean", "pinned", "after pin", "readers", "after readers"], out
    assert re.search(r"^pinned: throughput \d+% of clean .* claim p99 [\d.]+x clean", out, re.M)
    assert re.search(r"^after readers: backlog back to the clean phase's most", out, re.M)
    assert "(bench-pin, idle in transaction)" in out


@pytest.mark.skipif("postgresql" not in ENGINE, reason="a PostgreSQL benchmark")
@pytest.mark.skipif(django.VERSION < (6, 0), reason="run once, in the Django 6.1 cell")
def test_the_durable_benchmark_prints_a_step_and_a_wait_cycle_beside_pgbench():
    out = run_on_scratch("durable.py", "durable", "--steps", "20", "--tasks", "5", "--runs", "1")
    figures = re.findall(r"^(.+?): .*[\d,]+ \[[\d,]+-[\d,]+\] µs$", out, re.MULTILINE)
    assert figures == [
        "a step",
        "a park (run to the wait)",
        "a wake (one emit)",
        "a resume (run past the wait to completion)",
    ], out
    assert re.search(r"^a step: 4\.0 statements, ", out, re.MULTILINE), out
    assert re.search(r"^pgbench, the step's statements \(20 runs, one client\): ", out, re.M), out
