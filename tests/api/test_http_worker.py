"""examples/http_worker.py, run as a process against a live server: it knows the HTTP API only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta

import pytest

from scylla_django.enums import EventType, Status
from scylla_django.models import Task, Worker
from tests.helpers import make_user, token_header, typs
from tests.processes import ROOT, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

WORKER = [sys.executable, str(ROOT / "examples" / "http_worker.py")]
BASE = ["--poll-interval", "0.1", "-v"]
FAST = [*BASE, "--heartbeat-interval", "0.2", "--lease-length", "5"]


@pytest.fixture
def start(live_server):
    """Start the example worker on queue "http" as a user with `work_task`; stop it after."""
    token = token_header(make_user("http-worker", "work_task")).removeprefix("Token ")
    processes: list[subprocess.Popen[str]] = []

    def start(*args: str, options: list[str] = FAST) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [*WORKER, "--url", f"{live_server.url}/api/scylla/", "--queue=http", *options, *args],
            env={**os.environ, "SCYLLA_TOKEN": token},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


def finish(process: subprocess.Popen[str], timeout: float = 20) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def test_it_heartbeats_a_quarter_of_its_lease_by_default(start):
    task = Task.objects.submit("http", {"seconds": 30}, rn="long")
    process = start("--lease-length", "2", options=BASE)
    wait_until(lambda: Worker.objects.exists(), what="registration")
    worker = Worker.objects.get()
    assert (worker.lease_length, worker.heartbeat_interval) == (
        timedelta(seconds=2),
        timedelta(seconds=0.5),
    )
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.RUNNING, what="leased")
    first = Task.objects.get(pk=task.pk).deadline
    # Heartbeats every half second keep the 2 s lease: it is extended past its first end
    # and beyond, never lost (the same lease, still running).
    beyond = first + timedelta(seconds=2.5)
    wait_until(lambda: Task.objects.get(pk=task.pk).deadline > beyond, what="heartbeats")
    task.refresh_from_db()
    assert (task.status, task.leases, task.owner) == (Status.RUNNING, 1, worker.name)
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output


def test_it_completes_a_task_and_aborts_one_that_fails(start):
    Task.objects.submit("http", {"hello": 1}, rn="ok")
    Task.objects.submit("http", {"fail": "boom"}, rn="bad", priority=1)
    code, output = finish(start("--max-tasks", "2"))
    assert code == 0, output
    worker = Worker.objects.get()
    assert worker.user is not None and worker.user.username == "http-worker"
    ok, bad = Task.objects.get(rn="ok"), Task.objects.get(rn="bad")
    assert (ok.status, ok.result, ok.owner) == (
        Status.COMPLETED,
        {"echo": {"hello": 1}},
        worker.name,
    )
    assert bad.status == Status.ABORTED
    assert bad.errors == [
        {"code": "exception", "args": {"type": "RuntimeError"}, "description": "boom"}
    ]
    assert typs("ok") == [EventType.ASSIGNMENT, EventType.COMPLETION]
    assert typs("bad") == [EventType.ASSIGNMENT, EventType.ABORT]


def test_it_heartbeats_progress_and_stops_a_cancelled_task(start):
    task = Task.objects.submit("http", {"seconds": 30}, rn="slow")
    process = start("--max-tasks", "1")
    wait_until(lambda: Task.objects.get(pk=task.pk).progress > 0, what="a heartbeat with progress")
    task.refresh_from_db()
    assert task.status == Status.RUNNING
    task.cancel()
    code, output = finish(process)
    assert code == 0, output
    assert "task_cancelled" in output
    assert Task.objects.get(pk=task.pk).status == Status.CANCELLED
    assert typs("slow") == [EventType.ASSIGNMENT, EventType.CANCELLATION]


def test_sigterm_yields_its_tasks_and_exits(start):
    Task.objects.submit("http", {"seconds": 30}, rn="long")
    process = start()
    wait_until(lambda: Task.objects.filter(status=Status.RUNNING).exists(), what="a leased task")
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output
    assert typs("long") == [EventType.ASSIGNMENT, EventType.YIELD]
    assert Task.objects.reset_expired() == 1
    assert Task.objects.get(rn="long").status == Status.READY


def test_a_user_without_work_task_cannot_run_it(live_server):
    token = token_header(make_user("client", "view_task")).removeprefix("Token ")
    result = subprocess.run(
        [*WORKER, "--url", f"{live_server.url}/api/scylla/", "--queue", "http", "--token", token],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 1
    assert "permission_denied" in result.stderr
    assert not Worker.objects.exists()
