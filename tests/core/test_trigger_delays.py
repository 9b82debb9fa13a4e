"""A delay after a trigger ("run 10 minutes after the 4th partition arrived"): the firing
consumes its events at once, waits as a `delayed` firing until it is due, then goes through
the run constraints. On the virtual clock (PostgreSQL and SQLite)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

import scylla_django
from scylla_django import pytest_plugin
from scylla_django.firings import delayed, fire, release, why_not
from scylla_django.models import Consumption, Firing, Schedule, Task, WaitingRun
from scylla_django.monitor import Monitor
from scylla_django.schedules import clean_definition
from scylla_django.schedules import release as release_waiting
from scylla_django.triggers import clean_trigger

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor == "mysql", reason="the virtual clock runs on PostgreSQL and SQLite"
    ),
]

scylla_clock = pytest_plugin.scylla_clock


def make(name: str, trigger: dict, **raw) -> Schedule:
    raw.setdefault("queue", "q")
    definition = clean_definition(name, {"trigger": trigger, **raw})
    return Schedule.objects.create(name=name, next_run=None, **definition.fields())


def tasks_of(name: str) -> list[Task]:
    return list(Task.objects.filter(rn__startswith=f"schedule:{name}:").order_by("id"))


def partitions(count: int) -> list[int]:
    return [scylla_django.emit("partition.added", {"n": n}).pk for n in range(count)]


def test_a_delay_after_a_count_fires_once_at_its_due_time(scylla_clock):
    schedule = make(
        "publish",
        {"on_event": "partition.added", "count": 4, "delay": "10m", "with_events": True},
        spec={"job": "publish"},
    )
    monitor = Monitor(interval=60)
    passes = [monitor.triggers]
    events = partitions(4)
    assert monitor.run_once(passes).fired == 1
    [firing] = Firing.objects.filter(schedule=schedule)
    assert firing.outcome == "delayed" and firing.due is not None
    assert timedelta(minutes=9) < firing.due - firing.time <= timedelta(minutes=10)
    assert sorted(c.event_id for c in firing.consumptions.all()) == events
    assert tasks_of("publish") == []
    assert delayed(schedule) == [firing]
    assert why_not(schedule) == ["count 0 of 4 partition.added"]  # the 4 are consumed

    scylla_clock.advance(timedelta(minutes=9))
    assert monitor.run_once(passes).delayed_released == 0
    assert tasks_of("publish") == []

    scylla_clock.advance(timedelta(minutes=2))
    result = monitor.run_once(passes)
    assert (result.delayed_released, result.fired) == (1, 0)
    [task] = tasks_of("publish")
    assert task.rn == firing.rn
    assert task.spec["job"] == "publish"
    assert [e["id"] for e in task.spec["events"]] == events
    firing.refresh_from_db()
    assert firing.outcome == "submitted" and firing.due is not None  # the due time stays
    assert delayed(schedule) == []
    schedule.refresh_from_db()
    assert schedule.last_task == task.rn

    scylla_clock.advance(timedelta(hours=1))
    assert monitor.run_once(passes).delayed_released == 0
    assert len(tasks_of("publish")) == 1


def test_each_firing_waits_its_own_delay():
    """Eight partitions, two firings of four: each due ten minutes after its fourth."""
    make("publish", {"on_event": "partition.added", "count": 4, "delay": "10m"})
    partitions(4)
    [first] = fire()
    partitions(4)
    later = Firing.objects.get(rn=first.rn).due + timedelta(minutes=1)
    [second] = fire(now=later)
    assert (first.outcome, second.outcome) == ("delayed", "delayed")
    due = {f.rn: f.due for f in Firing.objects.all()}
    assert due[second.rn] == later + timedelta(minutes=10)
    assert [f.rn for f in release(now=due[first.rn])] == [first.rn]
    assert [t.rn for t in tasks_of("publish")] == [first.rn]
    assert [f.rn for f in release(now=due[second.rn])] == [second.rn]
    assert len(tasks_of("publish")) == 2


def test_a_delayed_firing_then_meets_the_run_constraints():
    """At its due time a delayed firing goes through the run constraints: the previous run
    still ready, it waits (max_concurrent) and runs once that run ends."""
    make("one", {"on_event": "partition.added", "delay": "5m"}, max_concurrent=1)
    partitions(1)
    [first] = fire()
    clock = Firing.objects.get(rn=first.rn).due
    assert [f.outcome for f in release(now=clock)] == ["submitted"]
    partitions(1)
    [second] = fire(now=clock)
    second_due = Firing.objects.get(rn=second.rn).due
    assert [f.outcome for f in release(now=second_due)] == ["waiting"]
    assert Firing.objects.get(rn=second.rn).outcome == "waiting"
    assert WaitingRun.objects.get().rn == second.rn
    Task.objects.filter(rn=first.rn).update(status="completed")
    assert [t.rn for t in release_waiting(now=second_due + timedelta(seconds=1))] == [second.rn]
    assert [t.rn for t in tasks_of("one")] == [first.rn, second.rn]


def test_a_delay_on_a_composite_trigger():
    make("join", {"all": [{"on_event": "a"}, {"on_event": "b"}], "delay": "1h"})
    scylla_django.emit("a", {})
    assert fire() == []
    scylla_django.emit("b", {})
    [fired] = fire()
    assert fired.outcome == "delayed" and len(fired.events) == 2
    due = Firing.objects.get().due
    assert release(now=due - timedelta(seconds=1)) == []
    assert [f.outcome for f in release(now=due)] == ["submitted"]
    assert Consumption.objects.count() == 2


@pytest.mark.parametrize(
    ("trigger", "code"),
    [
        ({"on_event": "x", "delay": "-5m"}, "invalid_duration"),
        ({"on_event": "x", "delay": 0}, "invalid_duration"),
        ({"on_event": "x", "delay": "soon"}, "invalid_duration"),
        ({"any": [{"on_event": "x", "delay": "5m"}]}, "invalid_trigger"),
    ],
)
def test_a_bad_delay_is_refused(trigger, code):
    with pytest.raises(ValidationError) as bad:
        clean_trigger(trigger)
    assert bad.value.code == code
    assert "delay" in bad.value.message


def test_a_schedule_made_after_the_clock_moved_counts_the_events_emitted_then(scylla_clock):
    """An event's time and a watermark's are read from the same (virtual) clock."""
    scylla_clock.advance(timedelta(hours=1))
    make("arrival", {"on_event": "partition.added"})
    [event] = partitions(1)
    assert [f.events for f in fire()] == [(event,)]
