"""Triggers under concurrency (PostgreSQL): three monitors at once with concurrent emitters and
workers fire each satisfied condition exactly once, and a monitor killed mid-pass loses and
duplicates nothing."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter

import pytest
from django.db import connection, transaction

import scylla_django
from scylla_django.models import Consumption, Event, Firing, Schedule, Task, WaitingRun, Worker
from scylla_django.monitor import Monitor
from scylla_django.schedules import clean_definition
from scylla_django.schedules.firings import fire
from tests.helpers import run_in_threads
from tests.processes import output_so_far, signal_each, start

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.concurrency,
]

EMITTERS = 3
EVENTS_EACH = 40


def make(name: str, trigger: dict, queue: str = "q") -> Schedule:
    definition = clean_definition(name, {"queue": queue, "trigger": trigger})
    return Schedule.objects.create(name=name, next_run=None, **definition.fields())


def assert_exactly_once(schedule: Schedule, expected_events: set[int], per_firing: int | None):
    consumed = list(
        Consumption.objects.filter(schedule=schedule).values_list("event_id", flat=True)
    )
    assert len(consumed) == len(set(consumed)), "an event fired the schedule twice"
    assert set(consumed) <= expected_events
    firings = list(Firing.objects.filter(schedule=schedule))
    rns = {f.rn for f in firings}
    tasks = set(
        Task.objects.filter(rn__startswith=f"schedule:{schedule.name}:").values_list(
            "rn", flat=True
        )
    )
    assert tasks == rns, "each firing submitted exactly its one task"
    if per_firing is not None:
        sizes = Counter(f.consumptions.count() for f in firings)
        assert set(sizes) <= {per_firing}
    return set(consumed)


def test_three_monitors_and_concurrent_emitters_fire_each_condition_once():
    arrival = make("arrival", {"on_event": "partition.added", "match": {"dataset": "sales"}})
    three = make("three", {"on_event": "partition.added", "count": 3})
    done = threading.Event()

    def emitter(index: int):
        def job(barrier):
            for n in range(EVENTS_EACH):
                with transaction.atomic():
                    scylla_django.emit("partition.added", {"dataset": "sales", "n": n, "i": index})
                    if n % 7 == 0:  # some transactions hold their event a moment
                        time.sleep(0.005)
            return None

        return job

    def monitor(barrier):
        fired = 0
        while not done.is_set():
            fired += len(fire())
        return fired

    def coordinator(barrier):
        emitted = run_in_threads([emitter(i) for i in range(EMITTERS)])
        done.set()
        return emitted

    # The coordinator runs the emitters in threads of their own; three monitors fire meanwhile.
    run_in_threads([coordinator, monitor, monitor, monitor])
    while fire():  # the last events, after the emitters stopped
        pass
    events = set(Event.objects.filter(kind="partition.added").values_list("pk", flat=True))
    assert len(events) == EMITTERS * EVENTS_EACH
    assert assert_exactly_once(arrival, events, None) == events, "every arrival fired"
    consumed = assert_exactly_once(three, events, 3)
    assert len(consumed) == (len(events) // 3) * 3


def test_task_events_with_three_monitors_and_concurrent_workers():
    after = make("then-b", {"on_task": "a"}, queue="b")
    tasks = 60
    first = Monitor(interval=60)
    first.run_once([first.triggers])  # the watermark starts here
    for n in range(tasks):
        Task.objects.submit("a", {"n": n}, rn=f"a-{n}")
    done = threading.Event()

    def worker_job(index: int):
        def job(barrier):
            worker = Worker.objects.register(queues=["a"], capacity=4, hostname="t", pid=index)
            finished = 0
            while True:
                leased = Task.objects.lease(worker, ["a"], limit=2)
                if not leased:
                    return finished
                for task in leased:
                    task.complete(worker, {"by": index})
                    finished += 1

        return job

    def monitor(barrier):
        own = Monitor(interval=60)
        while not done.is_set():
            own.run_once([own.triggers])
        return own.triggers.runs

    def coordinator(barrier):
        finished = run_in_threads([worker_job(i) for i in range(3)])
        done.set()
        return finished

    [finished, *_] = run_in_threads([coordinator, monitor, monitor, monitor])
    assert sum(finished) == tasks
    last = Monitor(interval=60)
    while last.run_once([last.triggers]).fired:
        pass
    events = set(Event.objects.filter(kind="task.completed").values_list("pk", flat=True))
    assert len(events) == tasks, "one event per completion, none doubled"
    assert Event.objects.values("history").distinct().count() == tasks
    assert assert_exactly_once(after, events, None) == events


@pytest.mark.slow
def test_a_monitor_killed_mid_pass_loses_and_duplicates_nothing():
    schedules = [make(f"arrival-{n}", {"on_event": "partition.added"}) for n in range(10)]
    pairs = make("pairs", {"on_event": "partition.added", "count": 2})
    assert not connection.in_atomic_block
    rng = random.Random(7)
    emitted = 0
    killed_while_firing = 0
    for _round in range(3):
        before = Firing.objects.count()
        monitors = [start("scylla_monitor", "--interval", "0.05") for _ in range(2)]
        give_up = time.monotonic() + 45
        while Firing.objects.count() == before:  # until the monitors fire
            assert time.monotonic() < give_up, output_so_far(monitors[0])
            scylla_django.emit("partition.added", {"n": emitted})
            emitted += 1
            time.sleep(0.02)
        stop_at = time.monotonic() + 0.3 + rng.random()
        while time.monotonic() < stop_at:  # the monitors fire while events keep coming
            scylla_django.emit("partition.added", {"n": emitted})
            emitted += 1
            time.sleep(0.005)
        killed_while_firing += Firing.objects.count() > before
        signal_each([m.pid for m in monitors], signal.SIGKILL)
        for m in monitors:
            m.wait()
    assert killed_while_firing == 3
    while fire():
        pass
    events = set(Event.objects.values_list("pk", flat=True))
    assert len(events) == emitted
    for schedule in schedules:
        assert assert_exactly_once(schedule, events, None) == events
    assert len(assert_exactly_once(pairs, events, 2)) == (emitted // 2) * 2


def test_three_monitors_gate_firings_by_the_run_constraints_once():
    """With max_concurrent=1 and the first run still ready, three monitors and concurrent
    emitters make one task per schedule: the waiting schedule holds one firing and merges the
    others into it, the skipping one skips them; every event consumed once."""
    waits = Schedule.objects.create(
        name="waits",
        next_run=None,
        **clean_definition(
            "waits", {"queue": "q", "trigger": {"on_event": "x"}, "max_concurrent": 1}
        ).fields(),
    )
    skips = Schedule.objects.create(
        name="skips",
        next_run=None,
        **clean_definition(
            "skips",
            {"queue": "q", "trigger": {"on_event": "x"}, "max_concurrent": 1, "when_unmet": "skip"},
        ).fields(),
    )
    done = threading.Event()

    def emitter(barrier):
        for n in range(EVENTS_EACH):
            with transaction.atomic():
                scylla_django.emit("x", {"n": n})
        done.set()

    def monitor(barrier):
        while not done.is_set():
            fire()

    run_in_threads([emitter, monitor, monitor, monitor])
    while fire():
        pass
    events = set(Event.objects.filter(kind="x").values_list("pk", flat=True))
    for schedule, others in ((waits, {"waiting", "merged"}), (skips, {"skipped"})):
        consumed = list(
            Consumption.objects.filter(schedule=schedule).values_list("event_id", flat=True)
        )
        assert sorted(consumed) == sorted(events), "every event consumed once"
        outcomes = Counter(
            Firing.objects.filter(schedule=schedule).values_list("outcome", flat=True)
        )
        assert outcomes["submitted"] == 1
        assert set(outcomes) - {"submitted"} <= others
        [task] = Task.objects.filter(rn__startswith=f"schedule:{schedule.name}:")
        assert Firing.objects.get(schedule=schedule, outcome="submitted").rn == task.rn
    waiting = WaitingRun.objects.get(schedule=waits)  # one firing waits, the later ones merge
    assert Firing.objects.filter(schedule=waits, outcome="waiting").get().rn == waiting.rn
    assert waiting.merged == Firing.objects.filter(schedule=waits, outcome="merged").count()
    assert not WaitingRun.objects.filter(schedule=skips).exists()
