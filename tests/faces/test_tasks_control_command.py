"""`manage.py scylla_tasks pause|resume|delete`: an operator's control of one task from the
command line, and its refusals."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scylla_django.models import Task, TaskDeletion
from tests.factories import running_task

pytestmark = pytest.mark.django_db


def tasks_command(*args: str) -> str:
    out = io.StringIO()
    call_command("scylla_tasks", *args, stdout=out)
    return out.getvalue()


def test_pause_show_resume(worker):
    first = Task.objects.submit("default", {}, rn="first")
    Task.objects.submit("default", {}, rn="second")
    assert tasks_command("pause", "first", "second") == "paused first\npaused second\n"
    assert Task.objects.lease(worker, ["default"], limit=5) == []
    shown = tasks_command("show", "first")
    assert "waits" in shown and "paused by" in shown
    assert tasks_command("resume", "first") == "resumed first\n"
    assert [t.rn for t in Task.objects.lease(worker, ["default"], limit=5)] == [first.rn]
    with pytest.raises(CommandError, match="second is paused already"):
        tasks_command("pause", "second")
    with pytest.raises(CommandError, match="first is not paused"):
        tasks_command("resume", "first")
    with pytest.raises(CommandError, match="No task has rn 'nope'"):
        tasks_command("pause", "nope")


def test_delete(worker):
    Task.objects.submit("default", {}, rn="gone")
    assert tasks_command("delete", "gone") == (
        "deleted gone (queue default); its record keeps 1 History row\n"
    )
    assert TaskDeletion.objects.get(rn="gone").history[-1]["_typ"] == "TaskDeletion"
    running = running_task(worker, rn="busy")
    with pytest.raises(CommandError, match="busy is running"):
        tasks_command("delete", running.rn)
    assert Task.objects.filter(rn="busy").exists()
