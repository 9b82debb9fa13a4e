"""`manage.py scylla_tasks`: list, show, watch, cancel, retry and requeue, and their refusals."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models.functions import Now

from scylla_django.enums import Status
from scylla_django.models import Task, Worker
from tests.factories import TaskFactory, running_task
from tests.processes import child_env

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def tasks_command(*args: str, stdout: io.StringIO | None = None) -> str:
    out = stdout or io.StringIO()
    call_command("scylla_tasks", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def some(worker):
    """a-1 completed, a-2 aborted (code `boom`), a-3 running at 40%, b-1 ready (queue b)."""
    done = running_task(worker, rn="a-1")
    done.complete(worker, {"rows": 3})
    failed = running_task(worker, rn="a-2")
    failed.abort(worker, {"code": "boom", "description": "it broke"}, retry=False)
    busy = running_task(worker, rn="a-3")
    busy.heartbeat(worker, progress=0.4)
    TaskFactory(rn="b-1", queue="b")
    return worker


# -- list -----------------------------------------------------------------------------------


def test_list_shows_a_table_newest_first(some):
    lines = tasks_command("list").splitlines()
    assert lines[0].split() == [
        "rn",
        "queue",
        "status",
        "progress",
        "attempt",
        "owner",
        "updated",
        "error",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["b-1", "a-3", "a-2", "a-1"]
    running = next(line for line in lines if line.startswith("a-3"))
    assert "running" in running and "40%" in running and some.name in running
    assert "boom" in next(line for line in lines if line.startswith("a-2"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--status", "running"], ["a-3"]),
        (["--status", "completed", "--status", "aborted"], ["a-2", "a-1"]),
        (["--queue", "b"], ["b-1"]),
        (["--rn-prefix", "a-"], ["a-3", "a-2", "a-1"]),
        (["--error-code", "boom"], ["a-2"]),
        (["--updated-within", "1h"], ["b-1", "a-3", "a-2", "a-1"]),
        (["--limit", "2"], ["b-1", "a-3"]),
    ],
)
def test_list_filters(some, args, expected):
    lines = tasks_command("list", *args).splitlines()
    rows = [line.split()[0] for line in lines[1:] if not line.startswith("(")]
    assert rows == expected


def test_list_owner_and_age_filters(some):
    assert "a-3" in tasks_command("list", "--owner", some.name)
    Task.objects.filter(rn="a-1").update(updated=Now() - timedelta(hours=3))
    out = tasks_command("list", "--updated-within", "2h")
    assert "a-1" not in out and "a-2" in out


def test_list_of_a_retry_chain(worker):
    first = running_task(worker, rn="c-1")
    first.abort(worker, {"code": "x"}, retry=False)
    second = first.retry()
    TaskFactory(rn="c-other")
    out = tasks_command("list", "--root", "c-1")
    assert [line.split()[0] for line in out.splitlines()[1:]] == [second.rn, "c-1"]


def test_list_when_nothing_matches(db):
    assert tasks_command("list", "--queue", "none").strip() == "No task matches."


def test_list_on_a_terminal_draws_a_rich_table(some):
    pytest.importorskip("rich")
    out = tasks_command("list", stdout=Terminal())
    assert "a-3" in out and "40%" in out and "┃" in out  # rich's header rule


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["list", "--status", "lost"], "invalid choice"),
        (["list", "--updated-within", "soon"], "is not a duration"),
        (["list", "--updated-within", "0"], "must be positive"),
        (["list", "--queue", "bad queue!"], "queue"),
        (["list", "--limit", "0"], "at least 1"),
        (["watch", "--interval=-1s"], "must be positive"),
        (["show", "no/such rn\x00"], "rn"),
    ],
)
def test_bad_input_is_a_command_error(db, args, words):
    with pytest.raises(CommandError, match=words):
        tasks_command(*args)


# -- show -----------------------------------------------------------------------------------


def test_show_prints_fields_errors_and_history(some):
    out = tasks_command("show", "a-2")
    assert "status        aborted" in out
    assert "boom: it broke" in out
    assert '"n":' in out  # the spec
    history = out[out.index("history:") :]
    assert history.index("TaskAssignment") < history.index("TaskAbort")
    assert some.name in history


def test_show_a_result_and_a_waiting_reason(some):
    assert '"rows": 3' in tasks_command("show", "a-1")
    Task.objects.filter(rn="b-1").update(not_before=Now() + timedelta(hours=1))
    assert "waits" in tasks_command("show", "b-1")


def test_show_an_unknown_rn(db):
    with pytest.raises(CommandError, match="No task has rn 'nope'"):
        tasks_command("show", "nope")


# -- watch ----------------------------------------------------------------------------------


def test_watch_once_prints_bars_of_running_tasks(some, other_worker):
    running_task(other_worker, rn="b-2", queue="default").heartbeat(other_worker, progress=1.0)
    out = tasks_command("watch", "--once")
    assert out.splitlines()[0].startswith("2 tasks running, 1 ready")
    bar_a3 = next(line for line in out.splitlines() if line.startswith("a-3"))
    assert "[########------------]  40%" in bar_a3
    assert "[####################] 100%" in out
    assert "a-1" not in out and "b-1" not in out  # not running


def test_watch_once_filters_by_queue(some):
    out = tasks_command("watch", "--once", "--queue", "b")
    assert out.splitlines() == [out.splitlines()[0]]
    assert out.startswith("0 tasks running, 1 ready")


def test_watch_once_on_a_terminal_draws_rich_bars(some):
    pytest.importorskip("rich")
    out = tasks_command("watch", "--once", stdout=Terminal())
    assert "a-3" in out and "40%" in out and "━" in out  # rich's bar


# -- operations -----------------------------------------------------------------------------


def test_cancel_several(some):
    out = tasks_command("cancel", "a-3", "b-1")
    assert out.splitlines() == ["cancelled a-3", "cancelled b-1"]
    assert set(Task.objects.filter(status=Status.CANCELLED).values_list("rn", flat=True)) == {
        "a-3",
        "b-1",
    }


def test_cancel_refuses_unknown_rns_before_cancelling_any(some):
    with pytest.raises(CommandError, match="No task has rn 'zz'"):
        tasks_command("cancel", "b-1", "zz")
    assert Task.objects.get(rn="b-1").status == Status.READY


def test_cancel_reports_terminal_tasks(some):
    out = io.StringIO()
    with pytest.raises(CommandError, match="Cannot cancel task a-1: it is completed"):
        tasks_command("cancel", "a-1", "b-1", stdout=out)
    assert out.getvalue() == "cancelled b-1\n"


def test_retry_submits_the_next_attempt(some):
    out = tasks_command("retry", "a-2")
    successor = Task.objects.get(retry_of="a-2")
    assert out.strip() == f"retried a-2 as {successor.rn} (attempt 2, ready)"
    assert successor.status == Status.READY


@pytest.mark.parametrize(("rn", "words"), [("a-1", "a-1 is completed"), ("nope", "No task has rn")])
def test_retry_refusals(some, rn, words):
    with pytest.raises(CommandError, match=words):
        tasks_command("retry", rn)


def test_retry_twice_is_refused(some):
    tasks_command("retry", "a-2")
    with pytest.raises(CommandError, match="already retried"):
        tasks_command("retry", "a-2")


def test_requeue_a_task_whose_worker_is_gone(some):
    # A worker killed a moment ago looks as alive as one at work: the refusal says how old its
    # heartbeat is and when it may be requeued, not that it is alive.
    Worker.objects.filter(pk=some.pk).update(
        last_seen=Now() - timedelta(seconds=4), silent_at=Now() + timedelta(seconds=16)
    )
    with pytest.raises(CommandError) as refused:
        tasks_command("requeue", "a-3")
    said = str(refused.value)
    assert re.fullmatch(
        rf"{some.name}'s last heartbeat was [45] s ago: it may still be working on task a-3; "
        r"if its process is gone, the lease can be reset once the worker is silent, in 1[56] s\.",
        said,
    ), said
    assert "alive" not in said
    some.stop()
    out = tasks_command("requeue", "a-3")
    assert out.strip() == f"requeued a-3: ready again ({some.name} lost its lease)"
    task = Task.objects.get(rn="a-3")
    assert (task.status, task.owner, task.progress) == (Status.READY, None, 0.0)
    assert task.history.last().typ == "TaskTimeout"


def test_discard_lets_a_dead_letter_go_once(some):
    assert Task.objects.get(rn="a-2").dead is not None
    out = tasks_command("discard", "a-2")
    assert out.strip() == "discarded a-2: aborted, no longer a dead letter"
    task = Task.objects.get(rn="a-2")
    assert (task.status, task.dead) == (Status.ABORTED, None)
    with pytest.raises(CommandError, match=r"Task a-2 is not a dead letter \(aborted\)"):
        tasks_command("discard", "a-2")
    with pytest.raises(CommandError, match=r"Task a-1 is not a dead letter \(completed\)"):
        tasks_command("discard", "a-1")


@pytest.mark.keys
def test_release_order_lets_the_key_s_later_tasks_run(worker):
    first = Task.objects.submit("default", {"n": 1}, rn="o-1", order_key="customer:9")
    Task.objects.submit("default", {"n": 2}, rn="o-2", order_key="customer:9")
    [leased] = Task.objects.lease(worker, ["default"], limit=5)
    assert leased.rn == first.rn
    leased.abort(worker, {"code": "boom"}, retry=False)
    assert Task.objects.lease(worker, ["default"], limit=5) == []  # the key is held
    out = tasks_command("release-order", "o-1")
    assert out.strip() == "released the order key customer:9 held by o-1: its later tasks may run"
    assert Task.objects.get(rn="o-1").history.last().typ == "TaskOrderRelease"
    assert [t.rn for t in Task.objects.lease(worker, ["default"], limit=5)] == ["o-2"]
    with pytest.raises(CommandError, match="o-1"):
        tasks_command("release-order", "o-1")


def test_requeue_refuses_a_task_that_is_not_running(some):
    with pytest.raises(CommandError, match="b-1 is ready: only a running task"):
        tasks_command("requeue", "b-1")


# -- watch in a real terminal ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_watch_renders_live_bars_under_tmux(worker):
    """A real `manage.py scylla_tasks watch` in tmux: the bar and rn appear, Ctrl-C ends it."""
    pytest.importorskip("rich")
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    task = running_task(worker, rn="tmux-watched")
    task.heartbeat(worker, progress=0.5)
    session = f"scylla-watch-{uuid.uuid4().hex[:8]}"
    env = child_env()
    command = f"{sys.executable} {ROOT / 'manage.py'} scylla_tasks watch --interval 200ms"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "30", command],
        cwd=ROOT,
        env=env,
        check=True,
    )
    # A command that fails leaves its last screen (a traceback) for the failure to show.
    subprocess.run(["tmux", "set-option", "-t", session, "remain-on-exit", "on"], check=False)
    try:
        screen = wait_for_screen(session, lambda text: "tmux-watched" in text and "50%" in text)
        assert "━" in screen  # the bar
        assert "1 task running" in screen
        Task.objects.filter(rn="tmux-watched").update(progress=0.75)
        wait_for_screen(session, lambda text: "75%" in text)
        subprocess.run(["tmux", "send-keys", "-t", session, "C-c"], check=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and pane_alive(session):
            time.sleep(0.1)
        assert not pane_alive(session), "Ctrl-C did not end the watch"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def wait_for_screen(session: str, ready, timeout: float = 90) -> str:
    """The pane's text once `ready(text)`; a Django process starting on a machine whose cores
    are busy may take tens of seconds to draw its first screen."""
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout
        if ready(screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"the screen never showed it:\n{screen}")


def pane_alive(session: str) -> bool:
    """Whether the command in the session's pane still runs (the pane stays after it exits)."""
    shown = subprocess.run(
        ["tmux", "display-message", "-p", "-t", session, "#{pane_dead}"],
        capture_output=True,
        text=True,
    )
    return shown.returncode == 0 and shown.stdout.strip() == "0"


def test_a_terminal_without_rich_gets_plain_text(some, monkeypatch):
    monkeypatch.setattr("scylla_django.management.terminal.has_rich", lambda: False)
    out = tasks_command("watch", "--once", stdout=Terminal())
    assert "[########------------]  40%" in out
    assert tasks_command("list", stdout=Terminal()).splitlines()[0].startswith("rn ")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", [["scylla_tasks", "show", "a-2"], ["scylla_queue", "list"]])
def test_a_reader_that_stops_reading_ends_the_command_quietly(some, command):
    """`scylla_tasks show RN | head`: the pipe's reader is gone before the command writes."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *command],
            cwd=ROOT,
            env=child_env(),
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(writer)
    assert done.returncode == 1
    # Nothing but what checks may warn of (MariaDB's missing partial indexes, say).
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_show_lists_a_parked_task_s_steps_cursor_waits_and_signals():
    from scylla_django.models.waits import WaitFor

    worker = Worker.objects.register(queues=["default"])
    task = running_task(worker, rn="parked")
    task.record_step(worker, "ask", {"sent": True})
    task.checkpoint(worker, {"page": 3})
    task.begin_wait(worker, WaitFor("decision", "signal", signal="approved"))
    task.signal("other")
    out = tasks_command("show", "parked")
    assert "waits         wait decision: signal approved" in out
    steps = out[out.index("steps:") :]
    assert re.search(r"^  ask\s+13 bytes\s+.*\s1$", steps, re.MULTILINE), out
    assert '"page": 3' in out[out.index("cursor:") :]
    assert re.search(r"^  decision\s+signal approved\s+.*\swaiting\s+1$", out, re.MULTILINE), out
    assert re.search(r"^  other\s", out[out.index("signals:") :], re.MULTILINE), out
