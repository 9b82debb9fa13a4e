"""`manage.py scylla_schedules`: list, show, pause, resume, run-now, why and calendar, with the
answers of the API and the admin, and its refusals."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import scylla_django
from scylla_django import schedules
from scylla_django.models import Schedule, Task, WaitingRun
from scylla_django.schedules import firings, tick
from tests.docs import page
from tests.helpers import API, client_for, make_user
from tests.processes import child_env

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def schedules_command(*args: str, stdout: io.StringIO | None = None) -> str:
    out = stdout or io.StringIO()
    call_command("scylla_schedules", *args, stdout=out)
    return out.getvalue()


def create(name: str, **raw: object) -> Schedule:
    """A schedule made as the API makes one: validated, then its next run set."""
    definition = schedules.clean_definition(name, {"queue": "q", **raw})
    schedule = Schedule.objects.create(name=name, enabled=definition.enabled, **definition.fields())
    schedules.reschedule(schedule)
    return schedule


@pytest.fixture
def three():
    """nightly (cron, Europe/Malta), sync (every 5m, paused), loads (a trigger)."""
    create("nightly", cron="30 2 * * *", timezone="Europe/Malta", spec={"kind": "daily"})
    create("sync", every="5m", enabled=False)
    create("loads", trigger={"on_event": "partition.added", "count": 2})


def test_list_shows_kind_state_and_runs(three):
    Task.objects.submit("q", {}, rn="schedule:nightly:x")
    Schedule.objects.filter(name="nightly").update(
        last_run=datetime(2026, 1, 2, 3, 0, tzinfo=UTC), last_task="schedule:nightly:x"
    )
    lines = schedules_command("list").splitlines()
    assert lines[0].split() == [
        "name",
        "kind",
        "state",
        "next",
        "run",
        "(UTC)",
        "last",
        "run",
        "(UTC)",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["loads", "nightly", "sync"]
    loads, nightly, sync = (line.split() for line in lines[1:])
    assert loads == ["loads", "trigger", "enabled", "-", "-"]
    next_minute = f"{Schedule.objects.get(name='nightly').next_run:%Y-%m-%d %H:%M}"
    assert nightly == ["nightly", "cron", "enabled", *next_minute.split(), "2026-01-02", "03:00"]
    assert sync[:3] == ["sync", "every", "paused"]


def test_list_without_schedules(db):
    assert schedules_command("list").strip() == "No schedule."


def test_list_on_a_terminal_draws_a_rich_table(three):
    pytest.importorskip("rich")
    out = schedules_command("list", stdout=Terminal())
    assert "nightly" in out and "┃" in out  # rich's header rule


def test_a_terminal_without_rich_gets_plain_text(three, monkeypatch):
    monkeypatch.setattr("scylla_django.management.terminal.has_rich", lambda: False)
    assert schedules_command("list", stdout=Terminal()).splitlines()[0].startswith("name ")


def test_show_prints_definition_state_and_recent_tasks(three):
    schedules.run_now(Schedule.objects.get(name="nightly"))
    out = schedules_command("show", "nightly")
    assert "timing           30 2 * * * (Europe/Malta)" in out
    assert "queue            q" in out and "state            enabled" in out
    assert '"kind": "daily"' in out  # the spec
    recent = out[out.index("recent tasks:") :]
    rn = Task.objects.get(rn__startswith="schedule:nightly:manual-").rn
    assert rn in recent and "ready" in recent
    assert f"{rn} (ready)" in out  # the last task, with its status
    assert "recent firings" not in out  # a cron schedule has ticks, not firings


def test_show_a_trigger_with_its_firings(three):
    for _ in range(2):
        scylla_django.emit("partition.added", {"dataset": "sales"})
    [fired] = firings.fire("default")
    out = schedules_command("show", "loads")
    assert "on " in out and "partition.added" in out
    recent = out[out.index("recent firings:") :]
    assert fired.rn in recent and "submitted" in recent and "partition.added #" in recent


def test_show_a_firing_that_waits(db):
    now = datetime.now(UTC)
    window = f"{now - timedelta(minutes=2):%H:%M}-{now - timedelta(minutes=1):%H:%M}"
    schedule = create("closed", every="1m", window=window)
    tick(now=schedule.next_run)
    waiting = WaitingRun.objects.get()
    out = schedules_command("show", "closed")
    assert "enabled, waiting" in out
    assert f"{waiting.rn}: waiting for window" in out


def test_pause_and_resume_as_the_admin_does(three):
    assert schedules_command("pause", "nightly").strip() == "paused nightly"
    assert not Schedule.objects.get(name="nightly").enabled
    assert schedules_command("pause", "nightly").strip() == "nightly was paused already"
    assert "paused" in next(
        line for line in schedules_command("list").splitlines() if line.startswith("nightly")
    )

    # Resumed a long while later: the next run is set from now, nothing missed is caught up.
    Schedule.objects.filter(name="sync").update(next_run=datetime(2020, 1, 1, tzinfo=UTC))
    out = schedules_command("resume", "sync")
    schedule = Schedule.objects.get(name="sync")
    assert schedule.enabled and schedule.next_run > datetime.now(UTC) - timedelta(minutes=1)
    assert out.startswith("resumed sync: next run ")
    assert schedules_command("resume", "sync").strip() == "sync was enabled already"
    assert schedules_command("resume", "loads").strip() == "loads was enabled already"
    schedules_command("pause", "loads")
    assert schedules_command("resume", "loads").strip() == "resumed loads: on events"


def test_the_admin_enables_and_disables_with_the_same_functions(admin_client, three):
    changelist = "/admin/scylla_django/schedule/"
    pk = Schedule.objects.get(name="sync").pk
    Schedule.objects.filter(pk=pk).update(next_run=datetime(2020, 1, 1, tzinfo=UTC))
    admin_client.post(changelist, {"action": "enable_selected", "_selected_action": [pk]})
    schedule = Schedule.objects.get(pk=pk)
    assert schedule.enabled and schedule.next_run > datetime.now(UTC) - timedelta(minutes=1)
    admin_client.post(changelist, {"action": "disable_selected", "_selected_action": [pk]})
    assert not Schedule.objects.get(pk=pk).enabled


def test_run_now_submits_the_task_as_the_api_does(three):
    out = schedules_command("run-now", "sync")  # paused or not, as the admin's and the API's
    task = Task.objects.get(rn__startswith="schedule:sync:manual-")
    assert out.strip() == f"submitted {task.rn} (queue q, ready)"
    assert Schedule.objects.get(name="sync").last_task == task.rn


def test_why_gives_the_answer_of_the_api(db):
    now = datetime.now(UTC)
    window = f"{now - timedelta(minutes=2):%H:%M}-{now - timedelta(minutes=1):%H:%M}"
    schedule = create("closed", every="1m", window=window)
    api = client_for(make_user("viewer", "view_schedule"))
    answer = api.get(f"{API}/schedules/closed/why/").json()
    [unmet] = answer["unmet"]
    out = schedules_command("why", "closed")
    assert "runs now  no: see below" in out
    assert f"unmet: window: {unmet['detail']} (until " in out

    tick(now=schedule.next_run)
    answer = api.get(f"{API}/schedules/closed/why/").json()
    out = schedules_command("why", "closed")
    assert f"waiting: {answer['waiting']['rn']}: {answer['waiting']['reason']}" in out

    create("free", every="1m")
    assert api.get(f"{API}/schedules/free/why/").json()["runs"] is True
    assert "runs now  yes: every run constraint is met" in schedules_command("why", "free")
    schedules_command("pause", "free")
    assert "runs now  no: it is paused" in schedules_command("why", "free")


def test_why_of_a_trigger(three):
    old = scylla_django.emit("partition.added", {})
    create("two", trigger={"on_event": "partition.added", "count": 2})
    answer = client_for(make_user("viewer", "view_schedule"))
    trigger = answer.get(f"{API}/schedules/two/why/").json()["trigger"]
    out = schedules_command("why", "two")
    assert trigger["counts_after"] == old.pk
    assert f"trigger counts: after event #{old.pk}, from " in out and "(since: change)" in out
    assert "trigger unmet: count 0 of 2 partition.added" in out


def test_calendar_marks_daylight_saving_as_the_admin_does(three):
    lines = schedules_command("calendar", "nightly", "--count", "500").splitlines()
    assert lines[0].split("  ")[0] == "tick (UTC)"
    assert len(lines) == 501
    # 500 days of 02:30 in Malta hold a spring gap (02:00 → 03:00) and an autumn repeat.
    assert any("moved to the end of the DST gap" in line for line in lines)
    assert any("repeated hour, first pass" in line for line in lines)
    assert lines[1].split("  ")[1].endswith(("CET", "CEST"))
    assert len(schedules_command("calendar", "nightly").splitlines()) == 11
    out = schedules_command("calendar", "sync")
    assert out.splitlines()[-1] == "(sync is paused: none of these fires until resumed)"
    assert (
        schedules_command("calendar", "loads").strip() == "loads has no ticks: it fires on events."
    )


def test_calendar_lists_the_ticks_of_the_api(three):
    api = client_for(make_user("viewer", "view_schedule"))
    entries = api.get(f"{API}/schedules/nightly/calendar/?count=3").json()
    lines = schedules_command("calendar", "nightly", "--count", "3").splitlines()[1:]
    shown = [datetime.fromisoformat(e["tick"]).astimezone(UTC) for e in entries]
    assert [line.split("  ")[0] for line in lines] == [f"{t:%Y-%m-%d %H:%M:%S}" for t in shown]


@pytest.mark.parametrize("operation", ["show", "pause", "resume", "run-now", "why", "calendar"])
def test_an_unknown_schedule_is_a_command_error_naming_it(three, operation):
    with pytest.raises(CommandError, match="No schedule is called 'nope'"):
        schedules_command(operation, "nope")
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["show", "bad name!"], "bad name!"),
        (["calendar", "nightly", "--count", "0"], "at least 1"),
        (["calendar", "nightly", "--count", "ten"], "not an integer"),
        (["stop", "nightly"], "invalid choice"),
    ],
)
def test_bad_input_is_a_command_error(three, args, words):
    with pytest.raises(CommandError, match=words):
        schedules_command(*args)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("operation", ["list", "show", "calendar"])
def test_a_reader_that_stops_reading_ends_the_command_quietly(three, operation):
    """`scylla_schedules calendar NAME | head`: the pipe's reader is gone before it writes."""
    reader, writer = os.pipe()
    os.close(reader)
    args = [] if operation == "list" else ["nightly"]
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "scylla_schedules", operation, *args],
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
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_the_documented_commands_run_as_written(three):
    """Every command of the section "The schedule CLI" of docs/howto/schedules.md runs on its
    schedules."""
    text = page("howto/schedules.md").read_text()
    section = text[text.index("## The schedule CLI") :]
    block = section[section.index("```sh\n") + 6 : section.index("```\n", 10)]
    commands = [line.split("#")[0].split()[3:] for line in block.splitlines()]
    assert [args[0] for args in commands] == [
        "list",
        "show",
        "pause",
        "resume",
        "run-now",
        "why",
        "calendar",
    ]
    for args in commands:
        assert schedules_command(*args)
    assert len(schedules_command(*commands[-1]).splitlines()) == 31
