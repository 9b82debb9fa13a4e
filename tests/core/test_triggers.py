"""Events and triggers: emit in the caller's transaction, every trigger kind, one firing per
satisfied condition, task events from History, "why didn't it fire?", bad input, purge.

Triggers run on the database clock, but for `quiet` and `window` a test passes a later `now`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ValidationError
from django.db import connection, transaction

import scylla_django
from scylla_django import db
from scylla_django.models import Consumption, Event, Firing, Schedule, Task, WaitingRun
from scylla_django.monitor import Monitor
from scylla_django.schedules import clean_definition, release, sync_from_settings
from scylla_django.schedules.events import record_task_events
from scylla_django.schedules.firings import Sweep, fire, listened, why_not
from scylla_django.schedules.triggers import clean_trigger, evaluate, screen

pytestmark = pytest.mark.django_db(transaction=True)


def make(name: str, trigger: dict, **raw) -> Schedule:
    raw.setdefault("queue", "q")
    definition = clean_definition(name, {"trigger": trigger, **raw})
    return Schedule.objects.create(name=name, next_run=None, **definition.fields())


def tasks_of(name: str) -> list[Task]:
    return list(Task.objects.filter(rn__startswith=f"schedule:{name}:").order_by("id"))


def now():
    return db.read_clock("default")


def test_emit_stores_an_event_in_the_callers_transaction():
    event = scylla_django.emit("partition.added", {"dataset": "sales"})
    assert Event.objects.get(pk=event.pk).payload == {"dataset": "sales"}
    with pytest.raises(RuntimeError), transaction.atomic():
        scylla_django.emit("partition.added", {"dataset": "lost"})
        raise RuntimeError
    assert not Event.objects.filter(payload__dataset="lost").exists()


def test_a_rolled_back_emit_fires_nothing():
    make("arrival", {"on_event": "partition.added"})
    with pytest.raises(RuntimeError), transaction.atomic():
        scylla_django.emit("partition.added", {"dataset": "sales"})
        raise RuntimeError
    assert fire() == []
    assert tasks_of("arrival") == []


def test_emit_refuses_a_bad_kind_or_payload():
    with pytest.raises(ValidationError) as bad:
        scylla_django.emit("has space", {})
    assert bad.value.code == "invalid_kind"
    with pytest.raises(ValidationError) as bad:
        scylla_django.emit("partition.added", ["not", "an", "object"])  # type: ignore[arg-type]
    assert bad.value.code == "invalid_payload"


def test_on_event_fires_once_per_arrival_and_consumes_its_events():
    schedule = make("arrival", {"on_event": "partition.added", "match": {"dataset": "sales"}})
    first = scylla_django.emit("partition.added", {"dataset": "sales", "day": 1})
    scylla_django.emit("partition.added", {"dataset": "marketing"})
    scylla_django.emit("table.dropped", {"dataset": "sales"})
    fired = fire()
    assert [(f.schedule, f.events) for f in fired] == [("arrival", (first.pk,))]
    assert fire() == []  # consumed: no second firing
    [task] = tasks_of("arrival")
    assert task.rn == f"schedule:arrival:e{first.pk}" and task.queue == "q"
    schedule.refresh_from_db()
    assert schedule.last_task == task.rn and schedule.next_run is None
    second = scylla_django.emit("partition.added", {"dataset": "sales", "day": 2})
    third = scylla_django.emit("partition.added", {"dataset": "sales", "day": 3})
    assert [f.events for f in fire()] == [(second.pk, third.pk)]
    assert len(tasks_of("arrival")) == 2
    firing = Firing.objects.filter(schedule=schedule).first()
    assert firing is not None
    assert [c.event_id for c in firing.consumptions.all()] == [second.pk, third.pk]


def test_match_on_nested_paths_numbers_and_booleans():
    make("deep", {"on_event": "file.landed", "match": {"meta.size": 3, "meta.ok": True}})
    scylla_django.emit("file.landed", {"meta": {"size": 4, "ok": True}})
    scylla_django.emit("file.landed", {"meta": {"size": 3, "ok": False}})
    assert fire() == []
    wanted = scylla_django.emit("file.landed", {"meta": {"size": 3, "ok": True}})
    assert [f.events for f in fire()] == [(wanted.pk,)]


def test_each_schedule_consumes_an_event_for_itself():
    make("one", {"on_event": "partition.added"})
    make("two", {"on_event": "partition.added"})
    scylla_django.emit("partition.added", {})
    assert sorted(f.schedule for f in fire()) == ["one", "two"]
    assert fire() == []


def test_the_spec_can_include_the_events_that_fired_it():
    make("with", {"on_event": "partition.added", "with_events": True}, spec={"job": "load"})
    event = scylla_django.emit("partition.added", {"dataset": "sales"})
    fire()
    [task] = tasks_of("with")
    assert task.spec["job"] == "load"
    assert [(e["id"], e["kind"], e["payload"]) for e in task.spec["events"]] == [
        (event.pk, "partition.added", {"dataset": "sales"})
    ]


def test_count_fires_every_n_events_and_says_how_many_it_has():
    schedule = make("four", {"on_event": "partition.added", "count": 4})
    events = [scylla_django.emit("partition.added", {"n": n}) for n in range(6)]
    assert [f.events for f in fire()] == [tuple(e.pk for e in events[:4])]
    assert fire() == []
    assert why_not(schedule) == ["count 2 of 4 partition.added"]
    more = [scylla_django.emit("partition.added", {"n": n}) for n in range(2)]
    assert [f.events for f in fire()] == [(events[4].pk, events[5].pk, more[0].pk, more[1].pk)]


def test_quiet_fires_once_the_events_stop():
    schedule = make("settled", {"on_event": "chunk.arrived", "quiet": "10m"})
    assert why_not(schedule) == ["no new chunk.arrived event"]
    chunks = [scylla_django.emit("chunk.arrived", {}) for _ in range(3)]
    assert fire() == []  # the last chunk is seconds old
    unmet = why_not(schedule)
    assert len(unmet) == 1 and unmet[0].startswith("quiet: last chunk.arrived event")
    later = now() + timedelta(minutes=11)
    assert [f.events for f in fire(now=later)] == [tuple(c.pk for c in chunks)]
    assert fire(now=later + timedelta(hours=1)) == []  # nothing new since: no firing


def test_all_needs_every_part_within_its_window():
    schedule = make(
        "join",
        {
            "all": [
                {"on_event": "partition.added", "match": {"dataset": "a"}},
                {"on_event": "partition.added", "match": {"dataset": "b"}},
            ],
            "window": "1h",
        },
    )
    a = scylla_django.emit("partition.added", {"dataset": "a"})
    assert fire() == []
    assert why_not(schedule) == [
        "all: 1 of 2 parts met",
        "no new partition.added {dataset=b} event",
    ]
    b = scylla_django.emit("partition.added", {"dataset": "b"})
    # Two hours on, both events are out of the window.
    assert fire(now=now() + timedelta(hours=2)) == []
    assert [f.events for f in fire()] == [(a.pk, b.pk)]


def test_any_fires_on_either_part_and_consumes_only_the_met_ones():
    make("either", {"any": [{"on_event": "x.done"}, {"on_event": "y.done", "count": 2}]})
    y = scylla_django.emit("y.done", {})
    x = scylla_django.emit("x.done", {})
    assert [f.events for f in fire()] == [(x.pk,)]
    assert fire() == []
    y2 = scylla_django.emit("y.done", {})
    assert [f.events for f in fire()] == [(y.pk, y2.pk)]


def test_on_task_fires_after_a_task_of_the_queue_completes(worker):
    make("then-b", {"on_task": "a", "match": {"spec.dataset": "sales"}}, queue="b")
    make("after-failure", {"on_task": "a", "status": "aborted"}, queue="alerts")
    record_task_events("default", listened("default")[0])  # the watermark starts here
    Task.objects.submit("a", {"dataset": "sales"}, rn="a-1")
    Task.objects.submit("a", {"dataset": "other"}, rn="a-2")
    Task.objects.submit("a", {"dataset": "sales"}, rn="a-3")
    leased = Task.objects.lease(worker, ["a"], limit=3)
    by_rn = {t.rn: t for t in leased}
    by_rn["a-1"].complete(worker, {"rows": 7})
    by_rn["a-2"].complete(worker)
    by_rn["a-3"].abort(worker, {"code": "boom"})
    assert fire() == []  # no task event yet: the monitor writes them
    monitor = Monitor(interval=60)
    result = monitor.run_once([monitor.triggers])
    assert result.task_events == 3 and result.fired == 2
    [b] = tasks_of("then-b")
    [alert] = tasks_of("after-failure")
    assert (b.queue, alert.queue) == ("b", "alerts")
    event = Event.objects.get(consumptions__firing__rn=b.rn)
    assert event.kind == "task.completed"
    assert event.payload["rn"] == "a-1" and event.payload["result"] == {"rows": 7}
    assert monitor.run_once([monitor.triggers]).fired == 0


def test_task_events_are_written_once_whatever_the_monitors(worker):
    make("then-b", {"on_task": "a"}, queue="b")
    record_task_events("default", listened("default")[0])
    for n in range(5):
        Task.objects.submit("a", {}, rn=f"a-{n}")
    for task in Task.objects.lease(worker, ["a"], limit=5):
        task.complete(worker)
    Task.objects.submit("other", {}, rn="o-1").cancel()
    pairs = listened("default")[0]
    assert record_task_events("default", pairs) == 5
    assert record_task_events("default", pairs) == 0
    assert Event.objects.filter(kind="task.completed").count() == 5
    assert not Event.objects.filter(kind="task.cancelled").exists()  # nobody listens


def test_bad_triggers_are_refused_with_clear_errors():
    def code(trigger) -> str:
        with pytest.raises(ValidationError) as bad:
            clean_trigger(trigger)
        return bad.value.code

    assert code({"on_event": "x", "match": ["dataset"]}) == "invalid_match"
    assert code({"on_event": "x", "match": {"dataset": {"nested": 1}}}) == "invalid_match"
    assert code({"on_event": "x", "match": {"": 1}}) == "invalid_match"
    assert code({"all": []}) == "empty_group"
    assert code({"any": "x"}) == "empty_group"
    assert code({"on_event": "x", "count": 0}) == "invalid_count"
    assert code({"on_event": "x", "count": -2}) == "invalid_count"
    assert code({"on_event": "x", "quiet": "-5m"}) == "invalid_duration"
    assert code({"all": [{"on_event": "x"}], "window": 0}) == "invalid_duration"
    assert code({"on_task": "a", "status": "running"}) == "invalid_status"
    assert code({"on_event": "x", "on_task": "a"}) == "invalid_trigger"
    assert code({"on_event": "x", "every": "5m"}) == "invalid_trigger"
    # An unknown kind is allowed: its events may come later.
    assert clean_trigger({"on_event": "not.yet.emitted"}) == {"on_event": "not.yet.emitted"}
    with pytest.raises(ValidationError) as bad:
        clean_definition("both", {"queue": "q", "cron": "* * * * *", "trigger": {"on_event": "x"}})
    assert "cron" in bad.value.message_dict


def test_a_bad_settings_trigger_is_reported_and_skipped(settings):
    settings.SCYLLA = {
        "SCHEDULES": {
            "good": {"queue": "q", "trigger": {"on_event": "partition.added"}},
            "bad": {"queue": "q", "trigger": {"all": []}},
        }
    }
    errors = [m for m in run_checks() if "bad" in str(m.msg) and "trigger" in str(m.msg)]
    assert errors, "a check names the bad schedule"
    monitor = Monitor(interval=60)
    monitor.run_once([monitor.schedules])  # the trigger counts the events from its sync on
    scylla_django.emit("partition.added", {})
    monitor.run_once([monitor.schedules, monitor.triggers])
    assert len(tasks_of("good")) == 1
    assert not Schedule.objects.filter(name="bad").exists()


def test_settings_schedules_with_triggers_sync():
    definition = clean_definition("arrival", {"queue": "q", "trigger": {"on_event": "x"}})
    sync_from_settings({"arrival": definition})
    schedule = Schedule.objects.get(name="arrival")
    assert schedule.trigger == {"on_event": "x"} and schedule.next_run is None


def test_consumed_events_are_purged_after_the_retention():
    make("arrival", {"on_event": "partition.added"})
    consumed = scylla_django.emit("partition.added", {})
    fire()
    waiting_kind = make("four", {"on_event": "chunk", "count": 4})
    waiting = scylla_django.emit("chunk", {})
    stray = scylla_django.emit("nobody.listens", {})
    assert waiting_kind.pk
    Event.objects.update(time=now() - timedelta(days=30))
    monitor = Monitor(interval=60, retention=timedelta(days=10))
    assert monitor.run_once([monitor.events]).events_purged == 2
    assert set(Event.objects.values_list("pk", flat=True)) == {waiting.pk}
    assert not Consumption.objects.filter(event_id=consumed.pk).exists()
    assert stray.pk not in set(Event.objects.values_list("pk", flat=True))
    assert connection.vendor  # the purge runs on every database


def test_a_sweep_evaluates_only_the_triggers_with_new_events_between_full_passes():
    make("a", {"on_event": "a.came"})
    make("b", {"on_event": "b.came"})
    make("quiet", {"on_event": "c.came", "quiet": "1m"})
    sweep = Sweep(full_every=60)
    assert sweep.kinds("default", 100.0) is None  # the first pass is a full one
    scylla_django.emit("a.came", {})
    assert sweep.kinds("default", 101.0) == {"a.came"}
    assert sweep.kinds("default", 102.0) == set()
    scylla_django.emit("b.came", {})
    scylla_django.emit("c.came", {})
    # The schedule "b" is not evaluated (its kind is not in the set): it fires at the next
    # full pass. The quiet one is evaluated at every pass, as time alone may meet it.
    assert [f.schedule for f in fire(kinds={"a.came"})] == ["a"]
    later = now() + timedelta(minutes=2)
    assert [f.schedule for f in fire(now=later, kinds=set())] == ["quiet"]
    assert sweep.kinds("default", 200.0) is None
    assert [f.schedule for f in fire(kinds=None)] == ["b"]


def test_a_sweep_evaluates_the_schedules_enabled_or_changed_since_its_last_pass():
    """Their unconsumed events may meet them at once: they are not left for the next full
    pass."""
    paused = make("paused", {"on_event": "a.came"})
    Schedule.objects.filter(pk=paused.pk).update(enabled=False)
    scylla_django.emit("a.came", {})
    scylla_django.emit("b.came", {})
    scylla_django.emit("b.came", {})
    pairs = make("pairs", {"on_event": "b.came", "count": 2})
    sweep = Sweep(full_every=60)
    assert fire(kinds=sweep.kinds("default", 100.0), sweep=sweep) == []  # a full pass
    assert why_not(pairs) == ["count 0 of 2 b.came"]  # the two came before it
    assert sweep.kinds("default", 101.0) == set()
    assert fire(kinds=set(), sweep=sweep) == []
    Schedule.objects.filter(pk=paused.pk).update(enabled=True)
    pairs.trigger = {"on_event": "b.came", "count": 2, "since": "all"}
    pairs.save()
    fired = fire(kinds=sweep.kinds("default", 102.0), sweep=sweep)
    assert sorted(f.schedule for f in fired) == ["pairs", "paused"]
    assert fire(kinds=sweep.kinds("default", 103.0), sweep=sweep) == []


# -- run constraints ----------------------------------------------------------------------------


def test_a_firing_outside_the_window_waits_merges_and_runs_when_it_opens():
    """A trigger's firing goes through the run constraints as a tick does: outside its window
    it waits (its events consumed, no task), a later firing merges into it, and it runs once
    the window opens, with the rn and spec of its own firing."""
    schedule = make(
        "nightly",
        {"on_event": "partition.added", "with_events": True},
        spec={"job": "load"},
        window="01:00-03:00",
    )
    midnight = datetime(2026, 6, 1, tzinfo=UTC)
    first = scylla_django.emit("partition.added", {"n": 1})
    [fired] = fire(now=midnight)
    assert (fired.rn, fired.outcome) == (f"schedule:nightly:e{first.pk}", "waiting")
    assert tasks_of("nightly") == []
    waiting = WaitingRun.objects.get(schedule=schedule)
    assert waiting.rn == fired.rn and waiting.code == "window"
    assert waiting.recheck == midnight + timedelta(hours=1)
    second = scylla_django.emit("partition.added", {"n": 2})
    assert [f.outcome for f in fire(now=midnight + timedelta(minutes=5))] == ["merged"]
    assert fire(now=midnight + timedelta(minutes=6)) == []  # both events consumed
    assert Consumption.objects.filter(event__in=[first, second]).count() == 2
    assert WaitingRun.objects.get(schedule=schedule).merged == 1
    assert [f.outcome for f in Firing.objects.order_by("id")] == ["waiting", "merged"]

    done = release(now=midnight + timedelta(hours=1, minutes=1))
    assert [(t.rn, t.outcome) for t in done] == [(fired.rn, "submitted")]
    [task] = tasks_of("nightly")
    assert task.rn == fired.rn and task.spec["job"] == "load"
    assert [e["id"] for e in task.spec["events"]] == [first.pk]
    assert not WaitingRun.objects.filter(schedule=schedule).exists()


def test_a_firing_over_max_concurrent_is_skipped_with_its_events_consumed():
    make("one-at-a-time", {"on_event": "partition.added"}, max_concurrent=1, when_unmet="skip")
    first = scylla_django.emit("partition.added", {"n": 1})
    assert [f.outcome for f in fire()] == ["submitted"]
    second = scylla_django.emit("partition.added", {"n": 2})
    [skipped] = fire()  # the first run is still ready
    assert skipped.outcome == "skipped" and skipped.events == (second.pk,)
    assert [t.rn for t in tasks_of("one-at-a-time")] == [f"schedule:one-at-a-time:e{first.pk}"]
    assert fire() == []  # consumed: a skipped firing does not come back
    assert not WaitingRun.objects.exists()
    Task.objects.filter(rn=f"schedule:one-at-a-time:e{first.pk}").update(status="completed")
    third = scylla_django.emit("partition.added", {"n": 3})
    assert [(f.events, f.outcome) for f in fire()] == [((third.pk,), "submitted")]


def test_max_runs_holds_a_trigger_firing_like_a_tick():
    schedule = make("rationed", {"on_event": "partition.added", "count": 2}, max_runs="1/h")
    events = [scylla_django.emit("partition.added", {"n": n}) for n in range(6)]
    clock = now()
    # Three firings of two events each: the first runs, the second waits for a max_runs slot,
    # the third merges into it.
    assert [f.outcome for f in fire(now=clock)] == ["submitted", "waiting", "merged"]
    assert Consumption.objects.count() == 6
    assert [t.rn for t in tasks_of("rationed")] == [f"schedule:rationed:e{events[0].pk}"]
    waiting = WaitingRun.objects.get(schedule=schedule)
    assert waiting.code == "max_runs" and waiting.rn == f"schedule:rationed:e{events[2].pk}"
    assert release(now=clock + timedelta(minutes=30)) == []  # not due a look yet
    assert [t.outcome for t in release(now=clock + timedelta(hours=1, seconds=1))] == ["submitted"]
    assert [t.rn for t in tasks_of("rationed")] == [
        f"schedule:rationed:e{events[0].pk}",
        f"schedule:rationed:e{events[2].pk}",
    ]


# -- a pass over many triggers ------------------------------------------------------------------

SHAPES = [
    lambda k: {"on_event": k, "match": {"dataset": "sales"}},
    lambda k: {"on_event": k, "count": 3},
    lambda k: {"on_event": k, "quiet": "10m"},
    lambda k: {"all": [{"on_event": k}, {"on_event": k, "match": {"n": 1}}], "window": "1h"},
    lambda k: {"any": [{"on_event": k, "match": {"n": 1}}, {"on_task": "load"}]},
]


def many_triggers(count: int, kinds: int = 10) -> list[Schedule]:
    """`count` schedules with triggers of every shape, over `kinds` event kinds."""
    rows = []
    for n in range(count):
        definition = clean_definition(
            f"s{n}", {"queue": "q", "trigger": SHAPES[n % 5](f"k{n % kinds}")}
        )
        rows.append(Schedule(name=f"s{n}", next_run=None, **definition.fields()))
    return Schedule.objects.bulk_create(rows)


def test_a_pass_over_many_unmet_triggers_is_a_few_queries(django_assert_max_num_queries):
    """A pass reads the triggers' leaves together (a query per `SCREEN_LEAVES` leaves), not a
    query or two per leaf: 200 triggers, nothing met."""
    many_triggers(200)  # 280 leaves
    for n in range(10):
        scylla_django.emit(f"k{n}", {"dataset": "marketing", "n": 2})  # met by the count ones
    scylla_django.emit("k1", {"dataset": "other"})
    with django_assert_max_num_queries(4):
        assert fire(kinds=None) == []


def test_the_screen_of_a_pass_says_what_evaluate_says():
    """`screen` (all triggers at once) and `evaluate` (one) agree on every shape, with and
    without events, consumed or not, in and out of windows and quiet periods."""
    schedules = many_triggers(40, kinds=4)
    clock = now()

    def agree(at):
        triggers = {s.pk: s.trigger for s in schedules}
        expected = {s.pk for s in schedules if evaluate(s.trigger, s.pk, at, "default").met}
        assert screen(triggers, at, "default") == expected
        return expected

    assert agree(clock) == set()
    for n in range(3):
        scylla_django.emit("k0", {"dataset": "sales", "n": n})
    scylla_django.emit("k1", {"dataset": "other", "n": 1})
    Task.objects.submit("load", {})  # not completed: no task event
    clock = now()
    assert agree(clock)  # some met
    assert agree(clock + timedelta(minutes=11))  # the quiet ones too
    later = agree(clock + timedelta(hours=2))  # out of the window of the all ones
    assert later != agree(clock + timedelta(minutes=11))
    fire(now=clock)
    assert agree(clock) == set()  # consumed
