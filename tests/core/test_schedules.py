"""Recurring schedules: one task per tick whatever the number of monitors, DST, catch-up.

The schedules run on a fake clock (`now=`); every other time is the database's.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.checks import WARNING, run_checks
from django.core.exceptions import ImproperlyConfigured, ValidationError

from scylla_django.enums import Status
from scylla_django.models import CatchUp, Schedule, Task
from scylla_django.monitor import Monitor
from scylla_django.schedules import (
    clean_definition,
    next_tick,
    parse_every,
    run_now,
    sync_from_settings,
    tick,
)
from scylla_django.schedules import configured as schedules_configured
from tests.helpers import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)

MALTA = ZoneInfo("Europe/Malta")
T0 = datetime(2026, 6, 1, tzinfo=UTC)


def make(name: str, now: datetime = T0, **raw) -> Schedule:
    raw.setdefault("queue", "q")
    definition = clean_definition(name, raw)
    return Schedule.objects.create(
        name=name, next_run=next_tick(definition, now), **definition.fields()
    )


def ticks_of(name: str) -> list[datetime]:
    prefix = f"schedule:{name}:"
    rns = Task.objects.filter(rn__startswith=prefix).values_list("rn", flat=True)
    return sorted(
        datetime.strptime(rn.removeprefix(prefix), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        for rn in rns
    )


def walk(start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    times, t = [], start.astimezone(UTC)  # step in UTC: wall-clock steps would skip DST hours
    while t <= end:
        times.append(t)
        t += step
    return times


# -- definitions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("5m", 300), ("2h", 7200), ("1d", 86400), (90, 90)]
)
def test_every_takes_durations(text, seconds):
    assert parse_every(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"queue": "q"}, "cron"),
        ({"queue": "q", "cron": "0 3 * * *", "every": "5m"}, "cron"),
        ({"queue": "q", "cron": "61 * * * *"}, "cron"),
        ({"queue": "q", "every": "soon"}, "every"),
        ({"queue": "q", "every": "0s"}, "every"),
        ({"queue": "q", "every": "5m", "timezone": "Mars/Olympus"}, "timezone"),
        ({"queue": "bad queue", "every": "5m"}, "queue"),
        ({"every": "5m"}, "queue"),
        ({"queue": "q", "every": "5m", "catch_up": "some"}, "catch_up"),
        ({"queue": "q", "every": "5m", "priority": 300}, "priority"),
        ({"queue": "q", "every": "5m", "colour": "red"}, "__all__"),
    ],
)
def test_bad_definitions_name_the_key(raw, key):
    with pytest.raises(ValidationError) as exc:
        clean_definition("s", raw)
    assert key in exc.value.error_dict


def test_a_bad_schedule_in_settings_is_a_system_check_warning(settings):
    """A warning, not an error: an error would stop every command, workers included."""
    settings.SCYLLA = {
        "SCHEDULES": {
            "good": {"every": "5m", "queue": "q"},
            "bad": {"cron": "nope", "queue": "q"},
        }
    }
    errors = [m for m in run_checks() if m.id == "scylla_django.W010"]
    assert len(errors) == 1 and "'bad'" in errors[0].msg and "cron" in errors[0].msg
    assert errors[0].level == WARNING
    assert not [m for m in run_checks() if m.id.startswith("scylla_django.E")]
    with pytest.raises(ImproperlyConfigured):
        _ = schedules_configured()
    settings.SCYLLA = {"SCHEDULES": {"good": {"every": "5m", "queue": "q"}}}
    assert not [m for m in run_checks() if m.id.startswith("scylla_django.E")]


# -- settings sync ------------------------------------------------------------------------------


def test_settings_are_synced_into_schedules_keeping_a_pause(settings):
    settings.SCYLLA = {
        "SCHEDULES": {
            "nightly": {
                "cron": "0 3 * * *",
                "timezone": "Europe/Malta",
                "queue": "reports",
                "spec": {"kind": "daily"},
                "priority": 50,
            },
            "sync": {"every": "5m", "queue": "sync"},
        }
    }
    assert sync_from_settings(schedules_configured(), now=T0).written == 2
    nightly = Schedule.objects.get(name="nightly")
    assert (nightly.queue, nightly.priority, nightly.spec) == ("reports", 50, {"kind": "daily"})
    assert nightly.next_run == datetime(2026, 6, 1, 3, tzinfo=MALTA)
    assert sync_from_settings(schedules_configured(), now=T0).written == 0  # nothing changed
    Schedule.objects.filter(name="sync").update(enabled=False)  # paused by an operator
    settings.SCYLLA = {"SCHEDULES": {"sync": {"every": "10m", "queue": "sync"}}}
    sync_from_settings(schedules_configured(), now=T0)
    [sync] = Schedule.objects.all()  # nightly left the settings: deleted
    assert (sync.every, sync.enabled) == (timedelta(minutes=10), False)


# -- ticking ------------------------------------------------------------------------------------


@pytest.mark.concurrency
def test_three_monitors_submit_each_tick_of_a_day_exactly_once():
    make("every5", every="5m")
    make("quarter", cron="*/15 * * * *", timezone="Europe/Malta")
    make("nightly", cron="0 3 * * *", timezone="Europe/Malta")
    # Every two and a half minutes: each pass either lands on a tick or falls between two.
    times = walk(T0, T0 + timedelta(days=1), timedelta(seconds=150))
    # The monitors share one clock: none may run ahead of another, or its catch-up (the
    # latest missed tick only) would stand in for a tick the others have not reached yet.
    step = threading.Barrier(3)

    def monitor(_):
        submitted = 0
        for t in times:
            step.wait(timeout=60)
            submitted += sum(1 for done in tick(now=t) if done.rn is not None)
        return submitted

    submitted = run_in_threads([monitor] * 3)

    day = [T0 + timedelta(minutes=5 * n) for n in range(1, 289)]
    assert ticks_of("every5") == day
    assert ticks_of("quarter") == [t for t in day if t.minute % 15 == 0]
    assert ticks_of("nightly") == [datetime(2026, 6, 1, 3, tzinfo=MALTA)]
    assert sum(submitted) == Task.objects.count() == 288 + 96 + 1


def test_dst_gap_and_repeat_follow_cron():
    spring = datetime(2026, 3, 28, tzinfo=MALTA)
    make("fixed", now=spring, cron="30 2 * * *", timezone="Europe/Malta")
    make("hourly", now=spring, cron="0 * * * *", timezone="Europe/Malta")
    for t in walk(spring, spring + timedelta(days=2), timedelta(minutes=10)):
        tick(now=t)
    # 02:30 does not exist on 29 March: the job runs at 03:00, when the gap ends.
    assert [t.astimezone(MALTA).isoformat() for t in ticks_of("fixed")] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
    ]
    assert len([t for t in ticks_of("hourly") if t.astimezone(MALTA).day == 29]) == 23

    autumn = datetime(2026, 10, 24, 12, tzinfo=MALTA)
    Schedule.objects.all().delete()
    make("fixed-autumn", now=autumn, cron="30 2 * * *", timezone="Europe/Malta")
    make("hourly-autumn", now=autumn, cron="0 * * * *", timezone="Europe/Malta")
    for t in walk(autumn, autumn + timedelta(days=2), timedelta(minutes=10)):
        tick(now=t)
    # 02:30 happens twice on 25 October: a job at a fixed hour runs once, an hourly one twice.
    assert [t.astimezone(MALTA).isoformat() for t in ticks_of("fixed-autumn")] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]
    local = [t.astimezone(MALTA) for t in ticks_of("hourly-autumn")]
    assert len([t for t in local if t.day == 25]) == 25
    assert [t.isoformat() for t in local if t.hour == 2 and t.day == 25] == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
    ]


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [
        (CatchUp.ONE, ["05:00"]),
        (CatchUp.ALL, ["00:00", "01:00", "02:00", "03:00", "04:00", "05:00"]),
        (CatchUp.NONE, []),
    ],
)
def test_catch_up_after_downtime(catch_up, expected):
    schedule = make("hourly", now=T0 - timedelta(minutes=1), every="1h", catch_up=catch_up)
    tick(now=T0 + timedelta(hours=5, minutes=30))  # the monitors were down for five hours
    assert [f"{t:%H:%M}" for t in ticks_of("hourly")] == expected
    schedule.refresh_from_db()
    assert schedule.next_run == T0 + timedelta(hours=6)


def test_catch_up_none_still_submits_a_tick_that_is_on_time():
    make("hourly", now=T0 - timedelta(minutes=1), every="1h", catch_up=CatchUp.NONE)
    tick(now=T0 + timedelta(seconds=30))
    assert ticks_of("hourly") == [T0]


def test_a_paused_schedule_submits_nothing():
    schedule = make("paused", every="1m")
    Schedule.objects.filter(pk=schedule.pk).update(enabled=False)
    for t in walk(T0, T0 + timedelta(hours=1), timedelta(minutes=1)):
        tick(now=t)
    assert not Task.objects.exists()


def test_skip_if_running_waits_for_the_previous_tick(worker):
    make("busy", every="1m", skip_if_running=True, queue="default")
    tick(now=T0 + timedelta(minutes=1))
    [first] = Task.objects.all()
    tick(now=T0 + timedelta(minutes=2))  # the first is still ready: skipped
    [leased] = Task.objects.lease(worker, ["default"])
    tick(now=T0 + timedelta(minutes=3))  # running: skipped
    leased.complete(worker)
    tick(now=T0 + timedelta(minutes=4))
    assert [f"{t:%M}" for t in ticks_of("busy")] == ["01", "04"]
    assert Schedule.objects.get().last_task == "schedule:busy:20260601T000400Z"
    assert first.rn == "schedule:busy:20260601T000100Z"


def test_run_now_submits_at_once_outside_the_ticks():
    schedule = make("manual", cron="0 3 * * *", spec={"a": 1}, priority=9)
    task = run_now(schedule)
    assert (task.queue, task.spec, task.priority, task.status) == ("q", {"a": 1}, 9, Status.READY)
    assert Schedule.objects.get().last_task == task.rn
    assert task.rn != run_now(schedule).rn


def test_the_monitor_syncs_and_ticks_on_its_clock(settings):
    settings.SCYLLA = {"SCHEDULES": {"often": {"every": "1m", "queue": "q"}}}
    clock = [T0]
    monitor = Monitor(clock=lambda: clock[0])
    assert monitor.run_once().ticks == 0
    clock[0] = T0 + timedelta(minutes=1)
    assert monitor.run_once().ticks == 1
    assert monitor.run_once().ticks == 0
    assert ticks_of("often") == [T0 + timedelta(minutes=1)]


def test_the_database_clock_is_the_default():
    schedule = make("past", now=datetime(2020, 1, 1, tzinfo=UTC), every="1h")
    [done] = tick()  # one catch-up tick for six years of hourly ticks
    assert done.rn is not None
    schedule.refresh_from_db()
    assert schedule.next_run > datetime.now(UTC) - timedelta(minutes=5)


BAD_AND_GOOD = {
    "SCHEDULES": {
        "bad": {"cron": "61 * * * *", "queue": "q"},
        "good": {"every": "1m", "queue": "q"},
    }
}


def test_a_bad_schedule_stops_no_command_and_the_monitor_ticks_the_others(settings, caplog):
    """Workers run schedules not: a bad one must not stop them. The monitor skips it, logs it
    (once) and ticks the good one."""
    import io

    from django.core.management import call_command

    settings.SCYLLA = BAD_AND_GOOD
    # With the system checks, as `manage.py scylla_worker` runs them.
    call_command(
        "scylla_worker",
        "--queue=t-echo",
        "--once",
        "--handlers=tests.worker_handlers",
        skip_checks=False,
        verbosity=0,
    )
    caplog.set_level("WARNING", logger="scylla_django")
    out = io.StringIO()
    call_command("scylla_monitor", "--once", stdout=out, skip_checks=False)
    assert out.getvalue() == "reset 0, purged 0\n"
    assert list(Schedule.objects.values_list("name", flat=True)) == ["good"]
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith("schedule 'bad' skipped: SCYLLA['SCHEDULES']['bad'] is invalid")

    Schedule.objects.all().delete()  # synced on the database's clock: start again on ours
    # The real-clock monitor above ticks "good" too when the worker's sync and its pass fall on
    # either side of a minute: those ticks are not the virtual clock's.
    Task.objects.filter(rn__startswith="schedule:good:").delete()
    clock = [T0]
    monitor = Monitor(clock=lambda: clock[0])
    monitor.run_once()
    clock[0] = T0 + timedelta(minutes=1)
    assert monitor.run_once().ticks == 1
    assert ticks_of("good") == [T0 + timedelta(minutes=1)]
    assert monitor.schedules.invalid.keys() == {"bad"}
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 2  # once per monitor


def test_a_schedule_that_turns_bad_is_kept_but_not_ticked(settings):
    settings.SCYLLA = {"SCHEDULES": {"often": {"every": "1m", "queue": "q"}}}
    clock = [T0]
    monitor = Monitor(clock=lambda: clock[0])
    monitor.run_once()
    settings.SCYLLA = {"SCHEDULES": {"often": {"every": "never", "queue": "q"}}}
    clock[0] = T0 + timedelta(minutes=5)
    assert monitor.run_once().ticks == 0
    assert Schedule.objects.get().every == timedelta(minutes=1)  # kept as it was, not deleted
    settings.SCYLLA = {"SCHEDULES": {"often": {"every": "1m", "queue": "q"}}}
    assert monitor.run_once().ticks == 1


def test_schedules_made_in_the_admin_or_the_api_tick_from_the_next_pass():
    """No restart: the Schedule table is read at every pass (settings, once per process)."""
    clock = [T0]
    monitor = Monitor(clock=lambda: clock[0])
    assert monitor.run_once().ticks == 0
    make("by-hand", every="1m")
    clock[0] = T0 + timedelta(minutes=1)
    assert monitor.run_once().ticks == 1
    Schedule.objects.filter(name="by-hand").update(enabled=False)
    clock[0] = T0 + timedelta(minutes=2)
    assert monitor.run_once().ticks == 0
