"""The virtual clock of `scylla_django.testing`: the database clock moved ahead by a test, with
the real lease, monitor, retry and schedule code running under it (docs/howto/testing.md's
example)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from scylla_django import db, pytest_plugin
from scylla_django.enums import EventType, Status
from scylla_django.models import History, Key, Task, Worker
from scylla_django.monitor import Monitor
from scylla_django.retries import Fixed, Retry
from scylla_django.testing import drain, run_task, virtual_clock
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)

pytestmark = pytest.mark.skipif(
    connection.vendor == "mysql",
    reason="the virtual clock runs on PostgreSQL and SQLite (MySQL: test_virtual_clock_refused)",
)

# The fixture, as a project's tests take it (or with pytest_plugins in their root conftest).
scylla_clock = pytest_plugin.scylla_clock


def test_an_abandoned_lease_expires_and_the_monitor_resets_it(scylla_clock):
    task = Task.objects.submit("t-echo", {"n": 1})
    worker = Worker.objects.register(["t-echo"])
    Task.objects.lease(worker, ["t-echo"], lease_length=60)  # a worker that then dies
    Monitor().run_once()
    assert Task.objects.get(pk=task.pk).status == Status.RUNNING  # its lease holds

    scylla_clock.advance(timedelta(minutes=10))  # the lease expires
    Monitor().run_once()  # the monitor resets it
    task.refresh_from_db()
    assert task.status == Status.READY
    assert History.objects.filter(task=task, typ=EventType.TIMEOUT).exists()
    assert run_task(task.rn).status == Status.COMPLETED


def test_a_retry_with_backoff_runs_once_its_time_comes(scylla_clock):
    task = Task.objects.submit("t-fail", {}, retry=Retry(backoff=Fixed(300)))
    assert run_task(task.rn).status == Status.ABORTED
    assert drain(["t-fail"]) == []  # the retry waits five minutes

    scylla_clock.advance(timedelta(minutes=5))
    [retry] = drain(["t-fail"])
    assert retry.retry_of == task.rn and retry.attempt == 2


def test_a_schedule_ticks_as_the_clock_moves(scylla_clock, settings):
    settings.SCYLLA = {"SCHEDULES": {"hourly": {"every": "1h", "queue": "t-echo", "spec": {}}}}
    ticks = Task.objects.filter(rn__startswith="schedule:hourly:")
    Monitor().run_once()
    before = ticks.count()
    Monitor().run_once()
    assert ticks.count() == before  # no tick is due twice within the hour

    scylla_clock.advance(timedelta(hours=1))
    Monitor().run_once()
    assert ticks.count() == before + 1


def test_every_reading_of_the_database_clock_moves(scylla_clock):
    real = scylla_clock.now()
    scylla_clock.advance(timedelta(days=2))
    shifted = db.read_clock("default")
    assert timedelta(days=2) <= shifted - real < timedelta(days=2, minutes=1)
    # A transition stamps its rows on the shifted clock.
    task = Task.objects.submit("t-echo", {})
    run_task(task.rn)
    task.refresh_from_db()
    assert task.updated - real >= timedelta(days=2)
    with pytest.raises(ValueError):
        scylla_clock.advance(timedelta(seconds=-1))


@pytest.mark.django_db(transaction=True)
def test_the_clock_is_real_again_after_the_block():
    before = db.read_clock("default")
    with virtual_clock() as clock:
        clock.advance(timedelta(hours=3))
        assert clock.now() - before >= timedelta(hours=3)
    assert db.read_clock("default") - before < timedelta(hours=3)  # not shifted any more


@pytest.mark.django_db
def test_the_clock_needs_a_transactional_test():
    with pytest.raises(RuntimeError, match="transactional"), virtual_clock():
        pass


def test_connections_of_other_threads_see_the_same_clock(scylla_clock):
    import threading

    from django.db import connections

    scylla_clock.advance(timedelta(hours=5))
    seen = []
    before = scylla_clock.now()

    def read() -> None:
        try:
            seen.append(db.read_clock("default"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert before <= seen[0] <= scylla_clock.now()  # shifted as this thread's clock is


def test_a_rate_opens_its_next_window_as_the_clock_moves(scylla_clock, settings):
    settings.SCYLLA = {"RATES": {"sms": "1/h"}}
    first, second = (Task.objects.submit("t-echo", {"n": n}, rate_key="sms") for n in range(2))
    worker = Worker.objects.register(["t-echo"])

    def lease() -> list[str]:
        return [t.rn for t in Task.objects.lease(worker, ["t-echo"], lease_length=60)]

    scylla_clock.advance(timedelta(days=1))
    assert lease() == [first.rn]
    leased_at = History.objects.get(task=first, typ=EventType.ASSIGNMENT).time
    [start] = Key.objects.get(name="R:sms").starts
    assert start == pytest.approx(leased_at.timestamp(), abs=0.001)  # on the shifted clock

    scylla_clock.advance(timedelta(minutes=59))
    assert lease() == []  # one start in the hour
    scylla_clock.advance(timedelta(minutes=2))
    assert lease() == [second.rn]
