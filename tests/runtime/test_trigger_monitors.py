"""Triggers under three monitors, each running in a thread of its own on its own connection
(PostgreSQL and SQLite), on the virtual clock: a trigger counts from its schedule's watermark,
a delayed firing runs once at its due time, a disabled schedule's delayed firing waits for it
to be enabled again, and a deleted schedule's is dropped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection

import scylla_django
from scylla_django import pytest_plugin, schedules
from scylla_django.models import Consumption, Event, Firing, Schedule, Task
from scylla_django.monitor import Monitor
from scylla_django.schedules import clean_definition

pytestmark = [
    pytest.mark.concurrency,
    pytest.mark.skipif(
        connection.vendor == "mysql", reason="the virtual clock runs on PostgreSQL and SQLite"
    ),
]

scylla_clock = pytest_plugin.scylla_clock

MONITORS = 3


class Monitors:
    """Monitors running in threads; `passes()` waits until each has made a whole trigger
    pass that began after it was called."""

    def __init__(self, count: int = MONITORS) -> None:
        self.monitors = [Monitor(interval=0.05) for _ in range(count)]
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=m.run, kwargs={"stop": self.stop}, name=f"monitor-{n}")
            for n, m in enumerate(self.monitors)
        ]

    def passes(self) -> None:
        targets = [m.triggers.runs + 2 for m in self.monitors]
        for monitor, runs in zip(self.monitors, targets, strict=True):
            assert monitor.triggers.wait_for_run(runs, timeout=60), "a monitor stopped passing"


@contextmanager
def monitors_running(caplog: pytest.LogCaptureFixture) -> Iterator[Monitors]:
    """Three monitors in threads for the block, stopped (and their threads joined) after it;
    no pass of theirs may fail."""
    caplog.set_level(logging.WARNING, logger="scylla_django")
    running = Monitors()
    for thread in running.threads:
        thread.start()
    try:
        running.passes()
        yield running
    finally:
        running.stop.set()
        for thread in running.threads:
            thread.join(timeout=30)
    assert not any(t.is_alive() for t in running.threads), "a monitor did not stop"
    failed = [r.getMessage() for r in caplog.records if "monitor pass failed" in r.getMessage()]
    assert not failed, failed


def make(name: str, trigger: dict) -> Schedule:
    definition = clean_definition(name, {"queue": "q", "trigger": trigger})
    return Schedule.objects.create(name=name, next_run=None, **definition.fields())


def partitions(count: int) -> list[int]:
    return [scylla_django.emit("partition.added", {"n": n}).pk for n in range(count)]


def tasks_of(name: str) -> list[str]:
    return list(
        Task.objects.filter(rn__startswith=f"schedule:{name}:").values_list("rn", flat=True)
    )


def test_three_monitors_count_from_the_watermark(scylla_clock, caplog):
    partitions(4)  # before the schedule: never counted
    with monitors_running(caplog) as monitors:
        schedule = make("five", {"on_event": "partition.added", "count": 5})
        monitors.passes()
        assert not Firing.objects.exists()
        partitions(4)
        schedule.trigger = {"on_event": "partition.added", "count": 3}
        schedule.save()  # 4 unconsumed, but from before the change
        monitors.passes()
        assert not Firing.objects.exists()
        new = partitions(3)
        monitors.passes()
        [firing] = Firing.objects.all()
        consumed = Consumption.objects.filter(firing=firing).values_list("event_id", flat=True)
        assert sorted(consumed) == new
        assert tasks_of("five") == [firing.rn]
        monitors.passes()
    assert Firing.objects.count() == 1 and Event.objects.count() == 11


def test_three_monitors_release_a_delayed_firing_once_at_its_due_time(scylla_clock, caplog):
    make("publish", {"on_event": "partition.added", "count": 4, "delay": "10m"})
    with monitors_running(caplog) as monitors:
        partitions(4)
        monitors.passes()
        [firing] = Firing.objects.all()
        assert firing.outcome == "delayed" and tasks_of("publish") == []
        scylla_clock.advance(timedelta(minutes=9))
        monitors.passes()
        assert tasks_of("publish") == []
        scylla_clock.advance(timedelta(minutes=2))
        monitors.passes()
        assert tasks_of("publish") == [firing.rn]
        monitors.passes()
    assert tasks_of("publish") == [firing.rn]
    assert Firing.objects.get().outcome == "submitted"
    released = sum(m.triggers.last.get("delayed_released", 0) for m in monitors.monitors)
    assert released == 0  # nothing left to release at the last passes


def test_a_disabled_schedules_delayed_firing_waits_and_runs_once_enabled(scylla_clock, caplog):
    schedule = make("publish", {"on_event": "partition.added", "count": 2, "delay": "10m"})
    with monitors_running(caplog) as monitors:
        partitions(2)
        monitors.passes()
        [firing] = Firing.objects.filter(outcome="delayed")
        Schedule.objects.filter(pk=schedule.pk).update(enabled=False)
        scylla_clock.advance(timedelta(minutes=11))
        monitors.passes()
        assert tasks_of("publish") == []
        assert Firing.objects.get().outcome == "delayed"  # kept, due already
        partitions(2)  # counted after it is enabled again: the watermark does not move
        monitors.passes()
        assert Firing.objects.count() == 1
        Schedule.objects.filter(pk=schedule.pk).update(enabled=True)
        monitors.passes()
        assert firing.rn in tasks_of("publish")
        monitors.passes()
    assert tasks_of("publish") == [firing.rn]
    [second] = Firing.objects.filter(outcome="delayed")  # the two later partitions', due later
    assert second.rn != firing.rn


def test_a_deleted_schedules_delayed_firing_is_dropped(scylla_clock, caplog):
    make("publish", {"on_event": "partition.added", "count": 2, "delay": "10m"})
    with monitors_running(caplog) as monitors:
        partitions(2)
        monitors.passes()
        [firing] = Firing.objects.filter(outcome="delayed")
        schedules.delete(Schedule.objects.filter(name="publish"))
        assert not Firing.objects.exists() and not Consumption.objects.exists()
        scylla_clock.advance(timedelta(minutes=11))
        monitors.passes()
        # Made again, the schedule counts afresh: the two partitions are not counted again.
        make("publish", {"on_event": "partition.added", "count": 2, "delay": "10m"})
        monitors.passes()
        assert not Firing.objects.exists()
    assert not Task.objects.filter(rn=firing.rn).exists()
    assert tasks_of("publish") == []


def test_a_schedule_deleted_as_its_firing_comes_due_runs_it_once_or_not_at_all(
    scylla_clock, caplog
):
    """The delete and the monitors' release meet on the schedule's row lock: the firing's task
    is submitted once (released before the delete) or not at all, and no pass fails."""
    outcomes = []
    with monitors_running(caplog) as monitors:
        for round_ in range(3):
            name = f"publish-{round_}"
            make(name, {"on_event": "partition.added", "count": 1, "delay": "10m"})
            partitions(1)
            monitors.passes()
            [firing] = Firing.objects.filter(schedule__name=name)
            scylla_clock.advance(timedelta(minutes=10))
            schedules.delete(Schedule.objects.filter(name=name))
            monitors.passes()
            assert tasks_of(name) in ([], [firing.rn])
            outcomes.append(bool(tasks_of(name)))
            assert not Firing.objects.exists()
    assert len(outcomes) == 3
