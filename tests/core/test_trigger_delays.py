"""A delay after a trigger ("run 10 minutes after the 4th partition arrived"): the firing
consumes its events at once, waits as a `delayed` firing until it is due, then goes through
the run constraints. On the virtual clock (PostgreSQL and SQLite)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

import scylla_django
from scylla_django import pytest_plugin, schedules
from scylla_django.models import Consumption, Event, Firing, Schedule, Task, WaitingRun
from scylla_django.monitor import Monitor
from scylla_django.schedules import clean_definition
from scylla_django.schedules import release as release_waiting
from scylla_django.schedules.firings import delayed, fire, release, why_not
from scylla_django.schedules.triggers import clean_trigger

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


def test_a_change_of_the_trigger_keeps_the_delayed_firings_and_their_due_times():
    schedule = make("publish", {"on_event": "partition.added", "count": 2, "delay": "10m"})
    partitions(2)
    [fired] = fire()
    due = Firing.objects.get().due
    schedule.trigger = {"on_event": "partition.added", "count": 3, "delay": "1m"}
    schedule.save()
    assert [(f.rn, f.due) for f in delayed(schedule)] == [(fired.rn, due)]
    assert release(now=due - timedelta(minutes=5)) == []
    assert [f.rn for f in release(now=due)] == [fired.rn]


def test_a_disabled_schedule_keeps_its_waiting_firings_and_a_deleted_one_drops_them():
    """Delayed or waiting for the run constraints, nothing is released while the schedule is
    disabled; on delete, both go."""
    schedule = make("gated", {"on_event": "partition.added", "delay": "5m"}, max_concurrent=1)
    partitions(1)
    [first] = fire()
    clock = Firing.objects.get(rn=first.rn).due
    release(now=clock)  # submitted: the next one waits for it to end
    partitions(1)
    [second] = fire(now=clock)
    second_due = Firing.objects.get(rn=second.rn).due
    assert [f.outcome for f in release(now=second_due)] == ["waiting"]
    partitions(1)
    [third] = fire(now=second_due)
    Schedule.objects.filter(pk=schedule.pk).update(enabled=False)
    Task.objects.filter(rn=first.rn).update(status="completed")
    later = second_due + timedelta(hours=1)
    assert release(now=later) == [] and release_waiting(now=later) == []
    assert WaitingRun.objects.get().rn == second.rn
    assert Firing.objects.get(rn=third.rn).outcome == "delayed"
    schedules.delete(Schedule.objects.filter(pk=schedule.pk))
    assert not WaitingRun.objects.exists() and not Firing.objects.exists()
    assert [t.rn for t in tasks_of("gated")] == [first.rn]


def test_the_purge_keeps_a_delayed_firing_whatever_its_age():
    schedule = make("publish", {"on_event": "partition.added", "delay": "10m"}, spec={})
    partitions(1)
    [fired] = fire()
    Schedule.objects.filter(pk=schedule.pk).update(enabled=False)
    old = Firing.objects.get().time - timedelta(days=30)
    Firing.objects.update(time=old)
    Event.objects.update(time=old)
    monitor = Monitor(interval=60, retention=timedelta(days=10))
    assert monitor.run_once([monitor.events]).events_purged == 1  # consumed: its event goes
    assert Firing.objects.get().rn == fired.rn  # the firing waits on
    Schedule.objects.filter(pk=schedule.pk).update(enabled=True)
    [released] = release(now=Firing.objects.get().due)
    assert released.rn == fired.rn and [t.rn for t in tasks_of("publish")] == [fired.rn]
