"""Queues routed to two PostgreSQL databases (`routers.QueueRouter`, `QUEUE_DATABASES`): each
task is submitted to its queue's database, a worker and a monitor run per database
(`--database`), and the API (`?database=`) and the admin (the list's database filter) read each.
"""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg
import pytest
from django.db import connection

from tests.processes import ROOT, child_env, database_url, finish, start, stop_leftovers

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.concurrency,
]

COUNT = 10


@pytest.fixture
def second_database():
    if connection.vendor != "postgresql":
        pytest.skip("two PostgreSQL databases")
    name = f"{connection.settings_dict['NAME']}_second"
    server = database_url().rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    env = {
        "SCYLLA_TEST_DATABASES": json.dumps({"second": f"{server}/{name}"}),
        "SCYLLA_TEST_SETTINGS": json.dumps({"QUEUE_DATABASES": {"t-sleep": "second"}}),
    }
    try:
        migrated = start("migrate", "--database", "second", "-v", "0", env=env)
        code, output = finish(migrated, timeout=120)
        assert code == 0, output
        yield env, f"{server}/{name}"
    finally:
        stop_leftovers()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def child(env: dict[str, str], *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tests.routed_child", *args],
        cwd=ROOT,
        env={**child_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def tasks_in(url: str) -> dict[str, tuple[str, str, str | None]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT rn, queue, status, owner FROM scylla_django_task").fetchall()
    return {rn: (queue, status, owner) for rn, queue, status, owner in rows}


def test_each_queue_lives_in_its_database_with_a_worker_and_a_monitor_each(second_database):
    env, second_url = second_database
    rns = child(env, "submit", str(COUNT))
    near, far = set(rns["near"]), set(rns["far"])
    default_rows, second_rows = tasks_in(database_url()), tasks_in(second_url)
    assert set(default_rows) == near and set(second_rows) == far

    common = ["--handlers=tests.worker_handlers", "--max-tasks", str(COUNT + 1), "--concurrency=2"]
    workers = [
        start("scylla_worker", "--queue=t-echo", *common, env=env),
        start("scylla_worker", "--queue=t-sleep", "--database=second", *common, env=env),
    ]
    for worker in workers:
        code, output = finish(worker, timeout=40)
        assert code == 0, output
    monitors = [
        start("scylla_monitor", "--once", env=env),
        start("scylla_monitor", "--once", "--database=second", env=env),
    ]
    for monitor in monitors:
        code, output = finish(monitor, timeout=30)
        assert code == 0 and "reset 0, purged 0" in output, output

    default_rows, second_rows = tasks_in(database_url()), tasks_in(second_url)
    assert {status for _queue, status, _owner in default_rows.values()} == {"completed"}
    assert {status for _queue, status, _owner in second_rows.values()} == {"completed"}
    assert set(default_rows) == near and set(second_rows) == far  # nothing moved across
    with psycopg.connect(second_url) as conn:
        (workers_there,) = conn.execute("SELECT count(*) FROM scylla_django_worker").fetchone()
    assert workers_there == 1

    seen = child(env, "read")
    assert set(seen["api_default"]) == near and set(seen["api_plain"]) == near
    assert set(seen["api_second"]) == far
    assert all(rn in seen["admin_second"] for rn in far)
    assert not any(rn in seen["admin_second"] for rn in near)
    assert all(rn in seen["admin_default"] for rn in near)
    assert all(rn in seen["admin_remembered"] for rn in far)
    assert "<strong>second</strong>" in seen["dashboard_remembered"]
    assert all(rn in seen["admin_back"] for rn in near)
    assert not any(rn in seen["admin_back"] for rn in far)
    far_done = f'scylla_tasks{{queue="t-sleep",status="completed"}} {len(far)}.0'
    assert far_done in seen["metrics_second"], seen["metrics_second"]
    status, body = seen["api_unknown"]
    assert status == 400 and body["code"] == "invalid", body
    assert "unknown_database" in json.dumps(body)
    assert seen["admin_unknown"] == 404


def test_the_commands_refuse_an_unknown_database(db):
    for command in ("scylla_worker", "scylla_monitor"):
        args = ["--queue=q"] if command == "scylla_worker" else []
        code, output = finish(start(command, *args, "--once", "--database=nowhere"), timeout=30)
        assert code != 0 and "--database 'nowhere' is not an alias" in output, output


def test_the_commands_refuse_the_read_replica(db):
    env = {
        "SCYLLA_TEST_DATABASES": json.dumps({"replica": database_url()}),
        "SCYLLA_TEST_SETTINGS": json.dumps({"READ_DATABASE": "replica"}),
    }
    code, output = finish(start("scylla_monitor", "--once", "--database=replica", env=env), 30)
    assert code != 0 and "a read-only replica" in output, output
