"""Health checks: `manage.py scylla_health` exit codes (in-process and as real processes) and
the API's `GET /health/`."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models.functions import Now
from rest_framework.test import APIClient

from scylla_django.models import Monitor, Task, Worker
from scylla_django.monitor import Monitor as MonitorLoop
from tests.factories import TaskFactory
from tests.processes import ROOT, child_env

HOST = socket.gethostname()


def health(*args: str) -> tuple[int, str]:
    """Run the command in-process: (exit status, stdout + stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("scylla_health", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + err.getvalue() + str(exc)
    return 0, out.getvalue() + err.getvalue()


@pytest.mark.django_db
def test_the_database_alone_is_checked_by_default():
    code, output = health()
    assert code == 0, output
    assert output.strip() == "ok database: reachable"


@pytest.mark.django_db
def test_worker_on_this_host():
    code, output = health("--worker")
    assert code == 1 and f"FAIL worker: no worker has registered from {HOST}" in output
    elsewhere = Worker.objects.register(["q"], hostname="elsewhere")
    assert health("--worker")[0] == 1
    assert health("--worker", "--hostname", "elsewhere")[0] == 0
    here = Worker.objects.register(["q"], hostname=HOST)
    code, output = health("--worker")
    assert code == 0 and f"ok worker: alive on {HOST}: {here.name}" in output
    Worker.objects.filter(pk=here.pk).update(silent_at=Now() - timedelta(seconds=1))
    code, output = health("--worker")
    assert code == 1 and f"the latest, {here.name}, is silent" in output
    assert elsewhere.current_state() == "alive"


@pytest.mark.django_db
def test_monitor():
    code, output = health("--monitor")
    assert code == 1
    assert "FAIL monitor: no monitor is running" in output
    assert "no monitor has ever made a pass" in output
    MonitorLoop(interval=5).run_once()
    code, output = health("--monitor")
    assert code == 0 and "ok monitor: the last pass ended" in output
    Monitor.objects.update(dead_at=Now() - timedelta(seconds=1))
    assert health("--monitor")[0] == 1


@pytest.mark.django_db
def test_lag():
    assert health("--max-lag", "1m")[0] == 0
    TaskFactory(queue="slow", rn="old")
    TaskFactory(queue="fast", rn="new")
    Task.objects.filter(rn="old").update(created=Now() - timedelta(minutes=5))
    code, output = health("--max-lag", "1m")
    assert code == 1
    assert "FAIL lag: ready tasks waiting longer than 1 min: slow (5 min)" in output
    code, output = health("--max-lag", "1m", "--queue", "fast")
    assert code == 0 and "(fast), under 1 min" in output
    assert health("--max-lag", "10m")[0] == 0
    # A delayed task only waits from its not_before.
    Task.objects.filter(rn="old").update(not_before=Now() - timedelta(seconds=10))
    assert health("--max-lag", "1m")[0] == 0


@pytest.mark.django_db
def test_every_failure_is_listed_and_the_checks_that_pass_too():
    code, output = health("--worker", "--monitor", "--max-lag", "1m")
    assert code == 1
    assert "ok database" in output and "ok lag" in output
    assert "unhealthy: worker, monitor" in output


@pytest.mark.parametrize(
    "args",
    [["--hostname", "h"], ["--queue", "q"], ["--max-lag", "soon"], ["--queue", "-bad"]],
)
def test_bad_arguments(args):
    with pytest.raises(CommandError) as caught:
        call_command("scylla_health", *args)
    if args[0] in ("--hostname", "--queue") and args[1] != "-bad":
        assert caught.value.returncode == 2


def test_bad_arguments_exit_2_from_the_command_line():
    assert run("--max-lag", "soon").returncode == 2
    assert run("--hostname", "h").returncode == 2


# -- real processes: the exit status a probe sees ---------------------------------------------


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "scylla_health", *args],
        cwd=ROOT,
        env=env or child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.django_db(transaction=True)
def test_exit_codes_of_the_process():
    assert run().returncode == 0
    failed = run("--monitor")
    assert failed.returncode == 1, failed
    assert "FAIL monitor" in failed.stderr
    MonitorLoop(interval=5).run_once()
    assert run("--monitor").returncode == 0


def test_exit_code_when_the_database_is_unreachable():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:9/nowhere",
        "PYTHONPATH": str(ROOT),
    }
    result = run("--monitor", env=env)
    assert result.returncode == 1, result
    assert "FAIL database: unreachable" in result.stderr
    assert "FAIL monitor: not checked: the database does not answer" in result.stderr


# -- the API ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_http_health_needs_no_login_and_answers_200_or_503():
    client = APIClient()
    response = client.get("/api/scylla/health/")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ok",
        "checks": [{"name": "database", "ok": True, "detail": "reachable"}],
    }
    response = client.get("/api/scylla/health/?monitor=true&max_lag=60&hostname=" + HOST)
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["status"] == "failing"
    assert [(c["name"], c["ok"]) for c in body["checks"]] == [
        ("database", True),
        ("worker", False),
        ("monitor", False),
        ("lag", True),
    ]
    Worker.objects.register(["q"], hostname=HOST)
    MonitorLoop(interval=5).run_once()
    response = client.get("/api/scylla/health/?monitor=true&max_lag=60&hostname=" + HOST)
    assert response.status_code == 200, response.content


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("max_lag=soon", "max_lag"),
        ("max_lag=0", "max_lag"),
        ("queue=-x", "queue.0"),
        ("hostname=", "hostname"),
        ("monitor=maybe", "monitor"),
    ],
)
def test_http_health_refuses_bad_parameters(query, field):
    response = APIClient().get(f"/api/scylla/health/?{query}")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]


@pytest.mark.django_db
def test_http_health_takes_a_hostname_of_whitespace_as_given():
    """The schema allows any non-empty hostname; one of spaces matches no worker (503)."""
    response = APIClient().get("/api/scylla/health/?hostname=%0D")
    assert response.status_code == 503, response.content
