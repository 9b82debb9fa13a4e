"""Where a trigger counts events from: the events after its schedule was created or its trigger
last changed (the schedule's watermark), or every unconsumed event with `since: "all"`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

import scylla_django
from scylla_django import db
from scylla_django.models import Event, Firing, Schedule
from scylla_django.schedules import clean_definition, sync_from_settings
from scylla_django.schedules.events import purge_events
from scylla_django.schedules.firings import fire, listened, watermarks, why_not
from scylla_django.schedules.triggers import clean_trigger, evaluate, mark_of, screen

pytestmark = pytest.mark.django_db(transaction=True)


def make(name: str, trigger: dict, **raw) -> Schedule:
    raw.setdefault("queue", "q")
    definition = clean_definition(name, {"trigger": trigger, **raw})
    return Schedule.objects.create(name=name, next_run=None, **definition.fields())


def emit(count: int, kind: str = "partition.added") -> list[Event]:
    return [scylla_django.emit(kind, {"n": n}) for n in range(count)]


def test_a_new_schedule_does_not_fire_on_the_events_from_before_it():
    emit(2)
    schedule = make("arrival", {"on_event": "partition.added"})
    assert schedule.counts_after == Event.objects.order_by("-id").first().pk
    assert fire() == []
    assert why_not(schedule) == ["no new partition.added event"]
    [new] = emit(1)
    assert [f.events for f in fire()] == [(new.pk,)]


def test_a_changed_count_counts_from_the_change():
    """count 5 with 4 unconsumed events, changed to count 3: it does not fire at once, but
    after 3 events that came after the change."""
    schedule = make("five", {"on_event": "partition.added", "count": 5})
    emit(4)
    assert fire() == []
    assert why_not(schedule) == ["count 4 of 5 partition.added"]
    schedule.trigger = {"on_event": "partition.added", "count": 3}
    schedule.save()
    assert fire() == []
    assert why_not(schedule) == ["count 0 of 3 partition.added"]
    new = emit(3)
    assert [f.events for f in fire()] == [tuple(e.pk for e in new)]


def test_a_change_of_anything_but_the_trigger_keeps_the_watermark():
    schedule = make("five", {"on_event": "partition.added", "count": 3})
    mark = (schedule.counts_after, schedule.counts_from)
    emit(2)
    schedule = Schedule.objects.get(pk=schedule.pk)
    schedule.queue = "other"
    schedule.enabled = False
    schedule.save()
    schedule.enabled = True
    schedule.save(update_fields=["enabled"])
    schedule.refresh_from_db()
    assert (schedule.counts_after, schedule.counts_from) == mark
    emit(1)
    assert [len(f.events) for f in fire()] == [3]


def test_since_all_counts_the_unconsumed_events_from_before():
    old = emit(4)
    schedule = make("all", {"on_event": "partition.added", "count": 3, "since": "all"})
    assert schedule.trigger["since"] == "all"
    assert [f.events for f in fire()] == [tuple(e.pk for e in old[:3])]
    assert why_not(schedule) == ["count 1 of 3 partition.added"]


def test_since_change_is_the_default_and_not_stored():
    assert clean_trigger({"on_event": "x", "since": "change"}) == {"on_event": "x"}


@pytest.mark.parametrize(
    ("trigger", "code"),
    [
        ({"on_event": "x", "since": "yesterday"}, "invalid_since"),
        ({"on_event": "x", "since": 0}, "invalid_since"),
        ({"on_event": "x", "since": None}, "invalid_since"),
        ({"all": [{"on_event": "x", "since": "all"}]}, "invalid_trigger"),
    ],
)
def test_a_bad_since_is_refused(trigger, code):
    with pytest.raises(ValidationError) as bad:
        clean_trigger(trigger)
    assert bad.value.code == code
    assert "since" in bad.value.message


def test_a_schedule_deleted_and_made_again_counts_afresh():
    """CDAP's case: 5 partitions wanted, 4 came, the schedule is deleted and made again, one
    more comes: it does not fire."""
    make("five", {"on_event": "partition.added", "count": 5})
    emit(4)
    Schedule.objects.get(name="five").delete()
    make("five", {"on_event": "partition.added", "count": 5})
    emit(1)
    assert fire() == []
    assert not Firing.objects.exists()


def test_a_settings_trigger_counts_from_its_sync_and_from_its_change():
    emit(3)
    definition = clean_definition(
        "s", {"queue": "q", "trigger": {"on_event": "partition.added", "count": 2}}
    )
    sync_from_settings({"s": definition})
    assert fire() == []
    emit(1)
    assert fire() == []
    mark = Schedule.objects.values_list("counts_after", flat=True).get(name="s")
    sync_from_settings({"s": definition})  # unchanged: the watermark stays
    assert Schedule.objects.values_list("counts_after", flat=True).get(name="s") == mark
    changed = clean_definition(
        "s", {"queue": "q", "trigger": {"on_event": "partition.added", "count": 1}}
    )
    sync_from_settings({"s": changed})
    assert fire() == []  # the event after the sync came before the change
    [new] = emit(1)
    assert [f.events for f in fire()] == [(new.pk,)]


def test_old_events_before_every_listeners_watermark_are_purged():
    """An event no trigger will count (it came before the watermark of every schedule that
    listens to its kind) is purged after the retention, as a consumed one is; one that a
    `since: "all"` trigger may still count is kept."""
    before = emit(2)
    make("later", {"on_event": "partition.added", "count": 5})
    kept = emit(1, "chunk")
    make("everything", {"on_event": "chunk", "count": 5, "since": "all"})
    after = emit(1)
    Event.objects.update(time=db.read_clock("default") - timedelta(days=30))
    _tasks, kinds = listened("default")
    assert watermarks("default") == {"partition.added": before[-1].pk}
    assert purge_events(timedelta(days=10), kinds, "default", watermarks("default")) == 2
    assert set(Event.objects.values_list("pk", flat=True)) == {kept[0].pk, after[0].pk}
    assert before


def test_the_watermark_moves_when_the_changed_trigger_is_written():
    schedule = make("s", {"on_event": "partition.added", "count": 3})
    mark = schedule.counts_after
    [event] = emit(1)
    schedule.trigger = {"on_event": "partition.added", "count": 2}
    schedule.save(update_fields=["queue"])  # the trigger is not written yet
    stored = Schedule.objects.get(pk=schedule.pk)
    assert (stored.trigger["count"], stored.counts_after) == (3, mark)
    schedule.save(update_fields=["trigger"])
    assert schedule.counts_after == event.pk
    assert Schedule.objects.get(pk=schedule.pk).counts_after == event.pk


def test_the_screen_of_a_pass_counts_from_the_watermarks_as_evaluate_does():
    """Schedules of every shape made at different points of a stream of events: the screen
    of a pass (watermarks read for the triggers met without them) agrees with `evaluate`."""
    shapes = [
        lambda k: {"on_event": k},
        lambda k: {"on_event": k, "count": 2},
        lambda k: {"on_event": k, "quiet": "10m"},
        lambda k: {"all": [{"on_event": k}, {"on_event": "other"}], "window": "1h"},
        lambda k: {"any": [{"on_event": k, "count": 3}, {"on_event": "other"}]},
        lambda k: {"on_event": k, "count": 2, "since": "all"},
    ]
    made = []
    for step in range(3):
        for n, shape in enumerate(shapes):
            made.append(make(f"s{step}-{n}", shape(f"k{n % 2}")))
        emit(step + 1, "k0")
        emit(step, "k1")
        emit(step % 2, "other")
    schedules = list(Schedule.objects.all())
    assert len({s.counts_after for s in schedules}) == 3

    def agree(at):
        triggers = {s.pk: s.trigger for s in schedules}
        marks = {s.pk: mark_of(s.trigger, s.counts_after, s.counts_from) for s in schedules}
        expected = {
            s.pk
            for s in schedules
            if evaluate(s.trigger, s.pk, at, "default", mark=marks[s.pk]).met
        }
        assert screen(triggers, at, "default", marks) == expected
        return expected

    clock = db.read_clock("default")
    met = agree(clock)
    assert met and met != {s.pk for s in schedules}
    unmarked = screen({s.pk: s.trigger for s in schedules}, clock, "default")
    assert unmarked > met, "without the watermarks, more would fire"
    assert agree(clock + timedelta(minutes=11)) != met  # the quiet ones too
    fire(now=clock)
    assert agree(clock) == set()
