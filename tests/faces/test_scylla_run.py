"""`manage.py scylla_run RN`: one task run in the foreground, for real or as a dry run."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task, Worker
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.helpers import typs
from tests.processes import ROOT, child_env

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("scylla_run", *args, stdout=out)
    return out.getvalue()


def snapshot() -> tuple[list[dict], int, int, int]:
    return (
        list(Task.objects.order_by("pk").values()),
        History.objects.count(),
        Worker.objects.count(),
        User.objects.count(),
    )


def test_it_runs_a_ready_task_and_writes_its_outcome():
    task = Task.objects.submit("t-user", {"name": "erin"})
    output = run(task.rn)
    assert f"{task.rn} completed" in output
    task.refresh_from_db()
    assert task.status == Status.COMPLETED
    assert task.result == {"user": User.objects.get(username="erin").pk}
    assert typs(task)[-2:] == [EventType.ASSIGNMENT, EventType.COMPLETION]
    worker = Worker.objects.get()
    assert worker.name == task.owner
    assert worker.hostname.endswith("(scylla_run)") and worker.stopped is not None


def test_an_abort_is_written_as_a_worker_writes_it():
    task = Task.objects.submit("t-abort", {"day": 2})
    assert "aborted" in run(task.rn)
    task.refresh_from_db()
    assert task.status == Status.ABORTED and task.errors[0]["code"] == "empty"


def test_a_dry_run_leaves_the_database_as_it_was():
    task = Task.objects.submit("t-user", {"name": "frank"})
    before = snapshot()
    output = run(task.rn, "--dry-run")
    assert f"{task.rn} completed" in output and "rolled back" in output
    assert snapshot() == before
    assert Task.objects.get(pk=task.pk).status == Status.READY


def test_unknown_rn_task_not_ready_and_queue_without_handler_are_command_errors():
    with pytest.raises(CommandError, match="No task has rn 'nope'"):
        run("nope")
    done = Task.objects.submit("t-echo", {})
    run(done.rn)
    with pytest.raises(CommandError, match="is completed, not ready"):
        run(done.rn)
    held = Task.objects.submit("t-echo", {}, after=[Task.objects.submit("t-echo", {}).rn])
    with pytest.raises(CommandError, match="waits for its parents"):
        run(held.rn)
    orphan = Task.objects.submit("no-such-handler", {})
    with pytest.raises(CommandError, match="No handler is registered"):
        run(orphan.rn)
    assert Task.objects.get(pk=orphan.pk).status == Status.READY


def test_pdb_opens_the_debugger_where_the_handler_raised():
    task = Task.objects.submit("t-fail", {"n": 3})
    process = subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "scylla_run",
            task.rn,
            "--pdb",
            "--handlers=tests.worker_handlers",
        ],
        input="p ctx.spec\nc\n",
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert "(Pdb)" in process.stdout, process.stdout + process.stderr
    assert "{'n': 3}" in process.stdout
    assert "raise ValueError" in process.stdout
    task.refresh_from_db()
    assert task.status == Status.ABORTED and task.errors[0]["code"] == "exception"
