"""Run constraints of schedules: window, min_gap, max_runs, max_concurrent; wait or skip; a
waiting firing's timeout; DST and window edges; one release however many monitors run.

The schedules run on a fake clock (`now=`); task times are the database's, so the min_gap tests
set the fake clock from the database's.
"""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ValidationError

from scylla_django import db
from scylla_django.db import Now
from scylla_django.enums import Status
from scylla_django.models import Schedule, Task, WaitingRun
from scylla_django.monitor import Monitor
from scylla_django.schedules import clean_definition, next_tick, release, tick
from scylla_django.schedules.calendars import calendar
from scylla_django.schedules.constraints import Constraints, parse_window, why
from tests.docs import page
from tests.helpers import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)

MALTA = ZoneInfo("Europe/Malta")
T0 = datetime(2026, 6, 1, tzinfo=UTC)  # 02:00 in Malta (summer, UTC+2)


def make(name: str, now: datetime = T0, **raw) -> Schedule:
    raw.setdefault("queue", "default")
    definition = clean_definition(name, raw)
    return Schedule.objects.create(
        name=name, next_run=next_tick(definition, now), **definition.fields()
    )


def outcomes(done) -> list[str]:
    return [t.outcome for t in done]


def rns() -> list[str]:
    return sorted(Task.objects.values_list("rn", flat=True))


def minutes(start: datetime, count: int, step: int = 1) -> list[datetime]:
    return [start + timedelta(minutes=step * n) for n in range(1, count + 1)]


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "key", "code"),
    [
        ({"window": "03:00-03:00"}, "window", "invalid_window"),
        ({"window": []}, "window", "invalid_window"),
        ({"window": "1am-3am"}, "window", "invalid_window"),
        ({"window": "25:00-03:00"}, "window", "invalid_window"),
        ({"window": ["01:00-03:00", 7]}, "window", "invalid_window"),
        ({"max_runs": "0/h"}, "max_runs", "invalid_max_runs"),
        ({"max_runs": "-1/h"}, "max_runs", "invalid_max_runs"),
        ({"max_runs": "4 per hour"}, "max_runs", "invalid_max_runs"),
        ({"min_gap": "-5m"}, "min_gap", "invalid_min_gap"),
        ({"min_gap": "0s"}, "min_gap", "invalid_min_gap"),
        ({"max_concurrent": 0}, "max_concurrent", "invalid_max_concurrent"),
        ({"max_concurrent": True}, "max_concurrent", "invalid_max_concurrent"),
        (
            {"max_concurrent": 2, "skip_if_running": True},
            "max_concurrent",
            "skip_if_running_and_max_concurrent",
        ),
        ({"when_unmet": "later"}, "when_unmet", "invalid_when_unmet"),
        ({"on_timeout": "explode"}, "on_timeout", "invalid_on_timeout"),
        ({"wait_timeout": "soon"}, "wait_timeout", "invalid_wait_timeout"),
    ],
)
def test_bad_constraints_name_the_key_and_code(raw, key, code):
    with pytest.raises(ValidationError) as caught:
        clean_definition("bad", {"every": "5m", "queue": "q", **raw})
    assert [e.code for e in caught.value.error_dict[key]] == [code]


def test_windows_are_stored_in_one_spelling():
    definition = clean_definition(
        "ok", {"every": "5m", "queue": "q", "window": ["1:00 - 3:00", "22:00-24:00"]}
    )
    assert definition.fields()["window"] == ["01:00-03:00", "22:00-24:00"]
    assert clean_definition("one", {"every": "5m", "queue": "q", "window": "23:00-01:30"}).fields()[
        "window"
    ] == ["23:00-01:30"]


# -- window -------------------------------------------------------------------------------------


def test_a_firing_outside_the_window_waits_for_it_and_later_ones_merge():
    # 20:00 UTC is 22:00 in Malta: the window opens at 01:00 Malta = 23:00 UTC.
    start = datetime(2026, 6, 1, 20, tzinfo=UTC)
    make("nightly", now=start, every="1h", window="01:00-03:00", timezone="Europe/Malta")
    first = tick(now=start + timedelta(hours=1))
    assert outcomes(first) == ["waiting"]
    waiting = WaitingRun.objects.get()
    assert waiting.reason == "waiting for window 01:00\N{EN DASH}03:00 (Europe/Malta)"
    assert waiting.recheck == datetime(2026, 6, 1, 23, tzinfo=UTC)
    assert [u.code for u in why(Schedule.objects.get(), start + timedelta(hours=1))] == ["window"]
    assert outcomes(tick(now=start + timedelta(hours=2))) == ["merged"]
    assert not Task.objects.exists()
    opened = tick(now=datetime(2026, 6, 1, 23, tzinfo=UTC))
    # The waiting firing (21:00) is released; the 23:00 tick merged into it first.
    assert sorted(outcomes(opened)) == ["merged", "submitted"]
    assert rns() == ["schedule:nightly:20260601T210000Z"]
    assert not WaitingRun.objects.exists()
    assert outcomes(tick(now=datetime(2026, 6, 2, 0, tzinfo=UTC))) == ["submitted"]
    # 03:00 Malta (01:00 UTC) is the window's end, excluded.
    assert outcomes(tick(now=datetime(2026, 6, 2, 1, tzinfo=UTC))) == ["waiting"]


def test_skip_drops_firings_outside_the_window():
    make("skipper", every="30m", window="02:00-03:00", timezone="Europe/Malta", when_unmet="skip")
    done = [d for t in minutes(T0, 6, 30) for d in tick(now=t)]
    # T0 is 02:00 Malta: 02:30 runs; 03:00, 03:30, ... are outside.
    assert outcomes(done) == ["submitted", "skipped", "skipped", "skipped", "skipped", "skipped"]
    assert not WaitingRun.objects.exists()


def test_a_window_across_midnight():
    c = Constraints(windows=parse_window("22:00-02:00"), timezone="UTC")
    day = datetime(2026, 6, 1, tzinfo=UTC)
    inside = [day.replace(hour=h) for h in (22, 23, 0, 1)]
    outside = [day.replace(hour=h) for h in (2, 3, 12, 21)]
    assert all(c.in_window(t) for t in inside)
    assert not any(c.in_window(t) for t in outside)
    assert c.window_opens(day.replace(hour=2)) == day.replace(hour=22)
    assert c.window_opens(day.replace(hour=23, minute=59)) == day.replace(hour=23, minute=59)
    assert c.in_window(day.replace(hour=1, minute=59, second=59))


def test_windows_over_dst_changes():
    # Malta springs from 02:00 to 03:00 on 2026-03-29: a window opening at 02:30 opens at 03:00.
    c = Constraints(windows=parse_window("02:30-04:00"), timezone="Europe/Malta")
    before = datetime(2026, 3, 28, 23, tzinfo=UTC)  # 00:00 Malta
    assert c.window_opens(before) == datetime(2026, 3, 29, 1, tzinfo=UTC)  # 03:00 CEST
    assert c.window_opens(before).astimezone(MALTA).hour == 3
    # Autumn: 02:00-03:00 happens twice on 2026-10-25; the window is open on both passes and
    # opens on the first.
    c = Constraints(windows=parse_window("02:15-02:45"), timezone="Europe/Malta")
    first = datetime(2026, 10, 25, 0, 15, tzinfo=UTC)  # 02:15 CEST
    second = datetime(2026, 10, 25, 1, 15, tzinfo=UTC)  # 02:15 CET
    assert c.window_opens(datetime(2026, 10, 24, 22, tzinfo=UTC)) == first
    assert c.in_window(first) and c.in_window(second)
    assert not c.in_window(datetime(2026, 10, 25, 0, 50, tzinfo=UTC))  # 02:50 CEST


def test_a_cron_tick_in_the_window_runs_at_once():
    make("at2", cron="10 2 * * *", window="02:00-02:30", timezone="Europe/Malta")
    assert outcomes(tick(now=T0 + timedelta(minutes=10))) == ["submitted"]


# -- max_runs, max_concurrent, min_gap -----------------------------------------------------------


def test_max_runs_per_period_skip():
    make("capped", every="10m", max_runs="2/h", when_unmet="skip")
    done = [d for t in minutes(T0, 12, 10) for d in tick(now=t)]
    assert (
        outcomes(done) == ["submitted", "submitted", "skipped", "skipped", "skipped", "skipped"] * 2
    )
    assert [r[-7:-1] for r in rns()] == ["001000", "002000", "011000", "012000"]


def test_max_runs_wait_releases_when_the_oldest_run_leaves_the_period():
    make("capped", every="20m", max_runs="1/h")
    assert outcomes(tick(now=T0 + timedelta(minutes=20))) == ["submitted"]
    assert outcomes(tick(now=T0 + timedelta(minutes=40))) == ["waiting"]
    assert WaitingRun.objects.get().recheck == T0 + timedelta(minutes=80)
    assert outcomes(tick(now=T0 + timedelta(minutes=60))) == ["merged"]
    assert outcomes(tick(now=T0 + timedelta(minutes=80))) == ["merged", "submitted"]
    assert [r[-7:-1] for r in rns()] == ["002000", "004000"]


def test_max_concurrent_waits_for_a_slot(worker):
    make("pair", every="1m", max_concurrent=2)
    tick(now=T0 + timedelta(minutes=1))
    tick(now=T0 + timedelta(minutes=2))
    assert outcomes(tick(now=T0 + timedelta(minutes=3))) == ["waiting"]
    assert "max_concurrent is 2" in WaitingRun.objects.get().reason
    leased = Task.objects.lease(worker, ["default"])
    assert outcomes(tick(now=T0 + timedelta(minutes=4))) == ["merged", "waiting"]
    leased[0].complete(worker)
    assert outcomes(tick(now=T0 + timedelta(minutes=5))) == ["merged", "submitted"]
    assert [r[-7:-1] for r in rns()] == ["000100", "000200", "000300"]


def test_skip_if_running_is_max_concurrent_one_with_skip():
    make("busy", every="1m", skip_if_running=True)
    tick(now=T0 + timedelta(minutes=1))
    assert outcomes(tick(now=T0 + timedelta(minutes=2))) == ["skipped"]
    assert not WaitingRun.objects.exists()


def test_min_gap_counts_from_the_end_of_the_last_run(worker):
    now = db.read_clock("default").astimezone(UTC)
    make("gap", now=now, every="1m", min_gap="10m")
    first = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    assert outcomes(tick(now=first)) == ["submitted"]
    assert outcomes(tick(now=first + timedelta(minutes=1))) == ["waiting"]
    assert "has not ended" in WaitingRun.objects.get().reason
    [leased] = Task.objects.lease(worker, ["default"])
    leased.complete(worker)
    ended = Task.objects.get(rn=leased.rn).updated
    assert outcomes(tick(now=first + timedelta(minutes=2))) == ["merged", "waiting"]
    assert WaitingRun.objects.get().recheck == ended + timedelta(minutes=10)
    assert outcomes(release_at(ended + timedelta(minutes=10))) == ["submitted"]
    assert len(rns()) == 2


def release_at(now: datetime):
    return release(now=now)


# -- timeouts -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("on_timeout", "expected"), [("cancel", 0), ("force", 1)])
def test_wait_timeout_cancels_or_forces(on_timeout, expected):
    make(
        "late",
        every="1h",
        window="23:00-23:30",
        wait_timeout="2h",
        on_timeout=on_timeout,
    )
    assert outcomes(tick(now=T0 + timedelta(hours=1))) == ["waiting"]
    assert WaitingRun.objects.get().deadline == T0 + timedelta(hours=3)
    assert WaitingRun.objects.get().recheck == T0 + timedelta(hours=3)
    assert outcomes(tick(now=T0 + timedelta(hours=2))) == ["merged"]
    assert sorted(outcomes(tick(now=T0 + timedelta(hours=3)))) == [
        "forced" if expected else "cancelled",
        "merged",
    ]
    assert Task.objects.count() == expected
    assert not WaitingRun.objects.exists()
    if expected:
        assert rns() == ["schedule:late:20260601T010000Z"]


# -- many monitors --------------------------------------------------------------------------------


@pytest.mark.concurrency
def test_three_monitors_release_each_waiting_firing_once():
    for n in range(20):
        make(f"w{n}", every="1h", window="00:30-01:00", max_runs="1/h")
    times = minutes(T0, 180, 1)
    step = threading.Barrier(3)

    def monitor(_):
        submitted = 0
        for t in times:
            step.wait(timeout=60)
            submitted += sum(1 for done in tick(now=t) if done.rn is not None)
        return submitted

    submitted = run_in_threads([monitor] * 3)
    # The 01:00 tick of each schedule waits (01:00 ends the window) and the 02:00 and 03:00
    # ticks merge into it; three monitors then release it once at the next opening.
    assert sum(submitted) == Task.objects.count() == 0
    assert WaitingRun.objects.count() == 20
    assert set(WaitingRun.objects.values_list("merged", flat=True)) == {2}

    opened = datetime(2026, 6, 2, 0, 30, tzinfo=UTC)
    results = run_in_threads([lambda _: tick(now=opened)] * 3)
    released = [d for done in results for d in done if d.outcome == "submitted"]
    assert len(released) == Task.objects.count() == 20
    assert set(Task.objects.values_list("rn", flat=True)) == {
        f"schedule:w{n}:20260601T010000Z" for n in range(20)
    }
    assert not WaitingRun.objects.exists()


# -- calendar -------------------------------------------------------------------------------------


def test_the_calendar_marks_dst_gaps_and_repeated_hours():
    spring = datetime(2026, 3, 27, tzinfo=UTC)
    fixed = make("fixed", now=spring, cron="30 2 * * *", timezone="Europe/Malta")
    entries = calendar(fixed, spring, 3)
    assert [(e.local.strftime("%d %H:%M"), e.dst) for e in entries] == [
        ("27 02:30", ""),
        ("28 02:30", ""),
        ("29 03:00", "gap"),
    ]
    at3 = make("at3", now=spring, cron="0 3 * * *", timezone="Europe/Malta")
    assert [e.dst for e in calendar(at3, spring, 3)] == ["", "", ""]

    autumn = datetime(2026, 10, 24, 23, 0, tzinfo=UTC)  # 01:00 CEST on the 25th
    hourly = make("hourly", now=autumn, cron="30 * * * *", timezone="Europe/Malta")
    entries = calendar(hourly, autumn, 4)
    assert [(e.local.strftime("%H:%M"), e.dst, e.fold) for e in entries] == [
        ("01:30", "", 0),
        ("02:30", "repeated", 0),
        ("02:30", "repeated", 1),
        ("03:30", "", 0),
    ]


def test_the_calendar_applies_windows_wait_and_skip():
    day = datetime(2026, 6, 1, 20, tzinfo=UTC)
    waits = make("waits", now=day, every="1h", window="23:30-01:00")
    entries = calendar(waits, day, 5)  # ticks 21:00 .. 01:00
    assert [(e.tick.hour, e.runs.strftime("%H:%M") if e.runs else None) for e in entries] == [
        (21, "23:30"),
        (22, None),
        (23, None),
        (0, "00:00"),
        (1, "23:30"),
    ]
    skips = make("skips", now=day, every="1h", window="23:30-01:00", when_unmet="skip")
    assert [e.runs is not None for e in calendar(skips, day, 5)] == [False] * 3 + [True, False]


# -- the docs (howto/schedules.md) -------------------------------------------------------------


def documented_schedules() -> dict:
    text = page("howto/schedules.md").read_text()
    [block] = re.findall(r"```python\n# run constraints\n(.*?)```", text, re.S)
    scope: dict = {}
    exec(block, scope)  # the page's own example
    return scope["SCYLLA"]["SCHEDULES"]


def test_the_documented_nightly_window_runs_once_at_one_in_the_morning():
    [(name, raw)] = documented_schedules().items()
    evening = datetime(2026, 6, 1, 15, tzinfo=UTC)  # 17:00 in Malta
    make(name, now=evening - timedelta(minutes=1), **raw)
    for hour in range(0, 8):  # 17:00 ... 00:00 Malta
        tick(now=evening + timedelta(hours=hour))
    assert not Task.objects.exists()
    assert WaitingRun.objects.get().merged == 7
    tick(now=datetime(2026, 6, 1, 23, tzinfo=UTC))  # 01:00 Malta
    [task] = Task.objects.all()
    assert task.rn == "schedule:nightly-compaction:20260601T150000Z"
    Task.objects.filter(pk=task.pk).update(status=Status.COMPLETED, updated=Now())
    # 02:00 and 03:00 Malta: within min_gap of the run's end (on the database clock, which
    # is later than this fake clock: the gap has not even begun).
    assert outcomes(tick(now=datetime(2026, 6, 2, 0, tzinfo=UTC))) == ["waiting"]
    assert "min_gap" in WaitingRun.objects.get().reason


# -- bad constraints in the settings --------------------------------------------------------


def test_a_bad_constraint_in_settings_is_its_own_warning_and_the_others_tick(settings, caplog):
    settings.SCYLLA = {
        "SCHEDULES": {
            "good": {"every": "1m", "queue": "q", "window": "00:00-24:00", "max_runs": "5/h"},
            "shut": {"every": "1m", "queue": "q", "window": "02:00-02:00"},
            "none": {"every": "1m", "queue": "q", "max_runs": "0/h"},
            "odd": {"every": "1m", "queue": "q", "when_unmet": "sometimes"},
        }
    }
    warnings = {m.msg.split("'")[3]: m.msg for m in run_checks() if m.id == "scylla_django.W010"}
    assert sorted(warnings) == ["none", "odd", "shut"]
    assert "never opens" in warnings["shut"] and "max_runs" in warnings["none"]
    assert "when_unmet" in warnings["odd"]
    assert not [m for m in run_checks() if m.id.startswith("scylla_django.E")]
    caplog.set_level("WARNING", logger="scylla_django")
    clock = [T0]
    monitor = Monitor(clock=lambda: clock[0])
    monitor.run_once()  # synced: the first tick is at 00:01
    clock[0] = T0 + timedelta(minutes=1)
    monitor.run_once()
    assert list(Schedule.objects.values_list("name", flat=True)) == ["good"]
    assert rns() == ["schedule:good:20260601T000100Z"]
    assert "'shut' skipped" in caplog.text


def test_catch_up_all_respects_min_gap_and_max_runs_within_one_pass():
    make("gapped", every="10m", catch_up="all", min_gap="1h", when_unmet="skip")
    make("counted", every="10m", catch_up="all", max_runs="2/h", when_unmet="skip")
    done = tick(now=T0 + timedelta(hours=1))  # six missed ticks each
    by_name = {
        name: [d.outcome for d in done if d.schedule == name] for name in ("gapped", "counted")
    }
    assert by_name["gapped"] == ["submitted"] + ["skipped"] * 5
    assert by_name["counted"] == ["submitted"] * 2 + ["skipped"] * 4
