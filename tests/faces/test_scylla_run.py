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
from scylla_django.retries import Retry
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


def test_an_abort_is_written_as_a_worker_writes_it_and_is_the_command_s_error():
    task = Task.objects.submit("t-abort", {"day": 2})
    with pytest.raises(CommandError, match=f"{task.rn} aborted: .*empty"):
        run(task.rn)
    task.refresh_from_db()
    assert task.status == Status.ABORTED and task.errors[0]["code"] == "empty"


def test_a_snooze_is_written_and_is_the_command_s_error():
    task = Task.objects.submit("t-snooze", {"times": 1, "delay": 300})
    with pytest.raises(CommandError, match=f"{task.rn} snoozed: it is ready again in 0:05:00"):
        run(task.rn)
    task.refresh_from_db()
    assert (task.status, task.snoozes) == (Status.READY, 1)


def test_a_dry_run_of_a_failing_task_fails_and_leaves_the_database_and_logs_as_they_were(
    settings, tmp_path
):
    settings.STORAGES = {
        **settings.STORAGES,
        "tasklogs": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path)},
        },
    }
    settings.SCYLLA = {**settings.SCYLLA, "TASK_LOG_STORAGE": "tasklogs"}
    task = Task.objects.submit("t-fail", {"n": 1})
    before = snapshot()
    with pytest.raises(CommandError, match=f"{task.rn} aborted: .*ValueError"):
        run(task.rn, "--dry-run")
    assert snapshot() == before
    assert not list(tmp_path.rglob("*.log"))  # the traceback it logged is not stored
    with pytest.raises(CommandError, match=f"{task.rn} aborted"):
        run(task.rn)
    assert [p.name for p in tmp_path.rglob("*.log")] == [f"{task.rn}.log"]


def test_the_exit_status_says_whether_the_task_completed():
    """0 when it completed; 1 otherwise, with why on stderr (and its retry, if one was
    submitted)."""
    done = Task.objects.submit("t-echo", {"n": 1})
    failed = Task.objects.submit("t-fail", {"n": 2}, retry=Retry(max_attempts=2))
    ran = {task.rn: command("scylla_run", task.rn) for task in (done, failed)}
    assert ran[done.rn].returncode == 0, ran[done.rn].stderr
    assert f"{done.rn} completed" in ran[done.rn].stdout
    retry = Task.objects.get(retry_of=failed.rn)
    assert ran[failed.rn].returncode == 1
    assert f"{failed.rn} aborted" in ran[failed.rn].stderr
    assert f"its retry {retry.rn} was submitted" in ran[failed.rn].stderr


def test_a_dry_run_leaves_the_database_as_it_was():
    task = Task.objects.submit("t-user", {"name": "frank"})
    before = snapshot()
    output = run(task.rn, "--dry-run")
    assert f"{task.rn} completed" in output and "rolled back" in output
    assert snapshot() == before
    assert Task.objects.get(pk=task.pk).status == Status.READY


def test_a_task_is_stopped_at_its_run_time_limit_but_not_under_pdb():
    limited = Task.objects.submit("t-sleep", {"seconds": 1}, timeout=0.2)
    with pytest.raises(CommandError, match=f"{limited.rn} aborted: .*timeout"):
        run(limited.rn)
    debugged = Task.objects.submit("t-sleep", {"seconds": 1}, timeout=0.2)
    process = command("scylla_run", debugged.rn, "--pdb")
    assert process.returncode == 0, process.stdout + process.stderr
    assert Task.objects.get(pk=debugged.pk).result == {"slept": 1}


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


def command(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`manage.py <args>` as a process of its own, with the t-* handlers."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args, "--handlers=tests.worker_handlers"],
        input=stdin,
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=60,
    )


def test_pdb_opens_the_debugger_where_the_handler_raised():
    task = Task.objects.submit("t-fail", {"n": 3})
    process = command("scylla_run", task.rn, "--pdb", stdin="p ctx.spec\nc\n")
    assert "(Pdb)" in process.stdout, process.stdout + process.stderr
    assert "{'n': 3}" in process.stdout
    assert "raise ValueError" in process.stdout
    assert process.returncode == 1
    task.refresh_from_db()
    assert task.status == Status.ABORTED and task.errors[0]["code"] == "exception"
