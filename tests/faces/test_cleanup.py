"""`manage.py scylla_cleanup`: the one-shot purge, its filters, dry run, chunks and progress."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models.functions import Now

from scylla_django.enums import Status
from scylla_django.management.commands.scylla_cleanup import Command as CleanupCommand
from scylla_django.models import History, Task
from tests.factories import TaskFactory, running_task

pytestmark = pytest.mark.django_db

TERMINAL = ("completed", "aborted", "cancelled")


class Terminal(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def tasks(worker):
    """One task in each status, on queues a and b, aged 30 days ("old-…") or 2 hours ("new-…")."""
    for age in ("old", "new"):
        for queue in ("a", "b"):
            for status in (*TERMINAL, "running"):
                task = running_task(worker, rn=f"{age}-{queue}-{status}", queue=queue)
                if status == "completed":
                    task.complete(worker)
                elif status == "aborted":
                    task.abort(worker, {"code": "x"})
                elif status == "cancelled":
                    task.cancel()
    for age in ("old", "new"):  # last, so that running_task leased the task it made
        for queue in ("a", "b"):
            TaskFactory(rn=f"{age}-{queue}-ready", queue=queue)
    # The aborts were given up (dead letters, which the cleanup keeps): let them go.
    assert Task.objects.all().discard() == 4
    Task.objects.filter(rn__startswith="old-").update(updated=Now() - timedelta(days=30))
    Task.objects.filter(rn__startswith="new-").update(updated=Now() - timedelta(hours=2))
    assert Task.objects.count() == 20


def cleanup(*args: str, stdout: io.StringIO | None = None) -> str:
    out = stdout or io.StringIO()
    call_command("scylla_cleanup", *args, stdout=out)
    return out.getvalue()


def remaining() -> set[str]:
    return set(Task.objects.values_list("rn", flat=True))


def everything_but(*rns: str) -> set[str]:
    return {
        f"{age}-{queue}-{status}"
        for age in ("old", "new")
        for queue in ("a", "b")
        for status in Status
    } - set(rns)


def test_dry_run_counts_and_deletes_nothing(tasks):
    assert cleanup("--dry-run") == "would delete 6 tasks\n"
    assert cleanup("--dry-run", "--status", "aborted", "--queue", "a") == "would delete 1 task\n"
    assert cleanup("--dry-run", "--older-than", "5w") == "would delete 0 tasks\n"
    assert cleanup("--dry-run", "--older-than", "1h") == "would delete 12 tasks\n"
    assert len(remaining()) == 20


def test_deletes_old_terminal_tasks_and_their_history_only(tasks):
    """Default age: the RETENTION setting (10 days). Ready, running and fresh tasks stay."""
    assert cleanup() == "deleted 6 tasks\n"
    assert remaining() == everything_but(*(f"old-{q}-{s}" for q in "ab" for s in TERMINAL))
    assert not History.objects.exclude(task__in=Task.objects.all()).exists()
    assert History.objects.filter(task__rn="old-a-running").exists()


def test_filters_by_status_queue_and_age(tasks):
    out = cleanup("--status", "completed", "--status", "cancelled", "--queue", "b")
    assert out == "deleted 2 tasks\n"
    assert remaining() == everything_but("old-b-completed", "old-b-cancelled")
    assert cleanup("--older-than", "31d") == "deleted 0 tasks\n"
    assert cleanup("--older-than", "29d", "--status", "aborted") == "deleted 2 tasks\n"
    assert remaining() == everything_but(
        "old-b-completed", "old-b-cancelled", "old-a-aborted", "old-b-aborted"
    )


def test_older_than_overrides_the_retention_setting(tasks, settings):
    settings.SCYLLA = {"RETENTION": timedelta(days=60)}
    assert cleanup() == "deleted 0 tasks\n"
    assert cleanup("--older-than", "90m", "--queue", "a") == "deleted 6 tasks\n"
    assert {rn for rn in remaining() if rn.endswith(("-ready", "-running"))} == {
        f"{age}-{q}-{s}" for age in ("old", "new") for q in "ab" for s in ("ready", "running")
    }


@pytest.fixture
def cancelled_seven(db):
    for n in range(7):
        TaskFactory(rn=f"gone-{n}").cancel()
    TaskFactory(rn="alive")
    Task.objects.update(updated=Now() - timedelta(days=30))


def test_small_chunks_delete_everything_and_print_no_progress_off_a_terminal(cancelled_seven):
    assert cleanup("--chunk-size", "2") == "deleted 7 tasks\n"
    assert remaining() == {"alive"}
    assert History.objects.count() == 0


def test_progress_on_a_terminal_rewrites_one_line_per_chunk(cancelled_seven):
    out = Terminal()
    cleanup("--chunk-size", "2", stdout=out)
    frames = out.getvalue().split("\r")
    shown = [frame.strip() for frame in frames if frame.strip()]
    assert shown == [
        "deleted 0/7 (0%)",
        "deleted 2/7 (28%)",
        "deleted 4/7 (57%)",
        "deleted 6/7 (85%)",
        "deleted 7/7 (100%)",
        "deleted 7 tasks",
    ]
    assert frames[-1] == "deleted 7 tasks\n"  # the progress line was blanked, then replaced
    assert "\n" not in "".join(frames[:-1])
    assert remaining() == {"alive"}


def test_chunk_size_defaults_to_the_setting(cancelled_seven, settings):
    settings.SCYLLA = {"PURGE_CHUNK_SIZE": 3}
    out = Terminal()
    cleanup(stdout=out)
    assert "deleted 3/7 (42%)" in out.getvalue()
    assert "deleted 6/7 (85%)" in out.getvalue()
    assert out.getvalue().endswith("\rdeleted 7 tasks\n")


@pytest.mark.parametrize("zero", ["0", "0s", "0.0h"])
def test_older_than_zero_deletes_every_terminal_task_whatever_its_age(tasks, zero):
    assert cleanup("--dry-run", "--older-than", zero) == "would delete 12 tasks\n"
    Task.objects.filter(rn__startswith="new-").update(updated=Now())
    assert cleanup("--older-than", zero, "-v", "2") == (
        "deleted 12 tasks\n(status aborted, cancelled, completed; any age; queue any)\n"
    )
    assert remaining() == {
        f"{age}-{q}-{s}" for age in ("old", "new") for q in "ab" for s in ("ready", "running")
    }


def test_progress_with_nothing_to_delete(db):
    out = Terminal()
    cleanup(stdout=out)
    assert out.getvalue().endswith("\rdeleted 0 tasks\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "7x"], "'7x' is not a duration"),
        (["--older-than=-3d"], "'-3d' must be positive"),
        (["--older-than", "200y"], "'200y' is not a duration"),
        (["--status", "ready"], "invalid choice: 'ready'"),
        (["--status", "running"], "invalid choice: 'running'"),
        (["--queue", "a b"], "--queue"),
        (["--queue", ""], "--queue"),
        (["--chunk-size", "0"], "'0' must be at least 1"),
        (["--chunk-size", "many"], "'many' is not an integer"),
    ],
)
def test_bad_arguments_are_command_errors(tasks, args, message):
    with pytest.raises(CommandError, match=message) as caught:
        cleanup(*args)
    assert args[0].split("=")[0] in str(caught.value)
    assert len(remaining()) == 20


def test_a_bad_setting_is_a_command_error(tasks, settings):
    settings.SCYLLA = {"RETENTION": "ten days"}
    with pytest.raises(CommandError, match="RETENTION"):
        cleanup()
    assert len(remaining()) == 20


def test_help_shows_the_current_settings(settings):
    settings.SCYLLA = {"RETENTION": timedelta(days=3), "PURGE_CHUNK_SIZE": 250}
    parser = CleanupCommand().create_parser("manage.py", "scylla_cleanup")
    text = " ".join(parser.format_help().split())
    assert "Default: the RETENTION setting (now 3 d)" in text
    assert "Default: the PURGE_CHUNK_SIZE setting (now 250)" in text
    assert "{aborted,cancelled,completed}" in text


def test_dead_letters_are_kept_until_discarded(worker):
    task = running_task(worker, rn="dead-one", queue="a")
    task.abort(worker, {"code": "x"})
    Task.objects.update(updated=Now() - timedelta(days=400))
    assert cleanup("--older-than", "0") == "deleted 0 tasks\n"
    Task.objects.all().discard()
    Task.objects.update(updated=Now() - timedelta(days=400))
    assert cleanup("--older-than", "0") == "deleted 1 task\n"
