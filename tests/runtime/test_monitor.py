"""The monitor: a pass resets expired leases and purges old terminal tasks; the loop stops at once
when asked, survives database errors with a backoff, and runs as `manage.py scylla_monitor`."""

from __future__ import annotations

import io
import logging
import math
import signal
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection, connections
from django.db.models.functions import Now

from scylla_django.enums import EventType, Status
from scylla_django.management.commands.scylla_monitor import Command as MonitorCommand
from scylla_django.models import History, Task, TaskQuerySet
from scylla_django.monitor import ExpiredLeases, Monitor, MonitorPass
from tests.factories import TaskFactory, running_task
from tests.helpers import expire
from tests.processes import finish, output_so_far, start, wait_until


def age(*rns: str, days: int = 30) -> None:
    """Make tasks look last updated `days` ago."""
    Task.objects.filter(rn__in=rns).update(updated=Now() - timedelta(days=days))


def scripted_wait(monitor: Monitor, stop: threading.Event, passes: int) -> list[float]:
    """Replace `monitor._wait`: record each wait, return at once; stop after `passes` successes."""
    waits: list[float] = []
    good = 0

    def fake_wait(event: threading.Event, timeout: float) -> bool:
        nonlocal good
        waits.append(timeout)
        if len(waits) >= 50:  # a monitor that never recovers: end the test, not hang it
            event.set()
        if monitor.last_pass is not None:  # a pass succeeded: this is the interval wait
            good += 1
            monitor.last_pass = None
            if good >= passes:
                event.set()
        return event.is_set()

    monitor._wait = fake_wait  # type: ignore[method-assign]
    return waits


# -- one pass ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_run_once_resets_expired_leases_and_purges_old_terminal_tasks(worker, caplog):
    expired = running_task(worker, rn="expired", queue="q-expired")
    expire(expired)
    running_task(worker, rn="alive", queue="q-alive")
    running_task(worker, rn="old-completed", queue="q-old").complete(worker)
    TaskFactory(rn="old-cancelled", queue="q-old").cancel()
    running_task(worker, rn="young-completed", queue="q-young").complete(worker)
    TaskFactory(rn="old-ready", queue="q-old-ready")
    age("old-completed", "old-cancelled", "old-ready")
    caplog.set_level(logging.DEBUG, logger="scylla_django")

    result = Monitor(retention=timedelta(days=10)).run_once()

    assert result == MonitorPass(reset=1, purged=2)
    assert set(Task.objects.values_list("rn", "status")) == {
        ("expired", Status.READY),
        ("alive", Status.RUNNING),
        ("young-completed", Status.COMPLETED),
        ("old-ready", Status.READY),
    }
    expired.refresh_from_db()
    assert expired.owner is None
    assert expired.history.last().typ == EventType.TIMEOUT
    assert not History.objects.filter(task__rn__startswith="old-c").exists()
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == ["reset 1 expired lease", "purged 2 tasks older than 10 d"]

    caplog.clear()
    assert Monitor(retention=timedelta(days=10)).run_once() == MonitorPass(reset=0, purged=0)
    assert {r.levelno for r in caplog.records} == {logging.DEBUG}


@pytest.mark.django_db
def test_run_once_reads_the_retention_setting_at_every_pass(settings):
    TaskFactory(rn="old").cancel()
    age("old", days=30)
    monitor = Monitor()
    settings.SCYLLA = {"RETENTION": timedelta(days=40)}
    assert monitor.run_once().purged == 0
    settings.SCYLLA = {"RETENTION": 20 * 86400}
    assert monitor.run_once().purged == 1


@pytest.mark.django_db
def test_run_once_handles_more_than_a_chunk(worker):
    for n in range(5):
        expire(running_task(worker, rn=f"expired-{n}"))
        TaskFactory(rn=f"old-{n}", queue="other").cancel()
    age(*(f"old-{n}" for n in range(5)))
    monitor = Monitor(retention=timedelta(days=1), reset_chunk_size=2, purge_chunk_size=2)
    assert monitor.run_once() == MonitorPass(reset=5, purged=5)
    assert Task.objects.filter(status=Status.READY).count() == 5
    assert not Task.objects.filter(queue="other").exists()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"interval": 0},
        {"interval": -1},
        {"interval": math.nan},
        {"retention": timedelta(0)},
        {"reset_chunk_size": 0},
        {"purge_chunk_size": True},
    ],
)
def test_monitor_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        Monitor(**kwargs)


# -- the loop ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_run_repeats_passes_and_stops_promptly_when_the_event_is_set(worker):
    """A loop in a thread keeps resetting leases that expire, and returns at once on stop."""
    monitor = Monitor(interval=0.05)
    stop, long_wait = threading.Event(), threading.Event()
    wait = monitor._wait

    def noted_wait(event: threading.Event, timeout: float) -> bool:
        if timeout > 0.5:  # ten times the passes' interval: services of their own may be sooner
            long_wait.set()
        return wait(event, timeout)

    monitor._wait = noted_wait  # type: ignore[method-assign]
    thread = threading.Thread(target=monitor.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    try:
        assert monitor.leases.wait_for_run(1), "the first pass"
        task = running_task(worker)
        expire(task)
        wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.READY, what="a later pass")
        monitor.interval = 3600.0  # now it sits in a long wait
        assert long_wait.wait(60), "the monitor never began a long wait"
    finally:
        stop.set()
        thread.join(timeout=60)  # far less than the hour it would wait if it missed the stop
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_each_service_runs_at_its_own_interval_and_tests_can_wait_for_a_run(worker):
    """The services share the loop, not their interval; `wait_for_run` replaces sleeping."""
    monitor = Monitor(interval=0.05)
    monitor.tasks.interval = 3600.0  # the purge: once, at the start
    assert [s.name for s in monitor.services] == [
        "expired leases",
        "follow-ups",
        "expiring tasks",
        "priority aging",
        "callbacks",
        "notification deliveries",
        "schedule ticks",
        "limits and rates",
        "trigger firings",
        "finished tasks",
        "process records",
        "queue rollups",
        "old events",
    ]
    stop = threading.Event()
    thread = threading.Thread(target=monitor.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    try:
        assert monitor.leases.wait_for_run(1)
        task = running_task(worker)
        expire(task)
        runs = monitor.leases.runs
        assert monitor.leases.wait_for_run(runs + 2)  # a whole run after the lease expired
        assert Task.objects.get(pk=task.pk).status == Status.READY
        assert monitor.followups.wait_for_run(runs + 2)
        assert monitor.tasks.runs == 1
        assert not monitor.tasks.wait_for_run(2, timeout=0.1)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_service_rejects_a_bad_interval():
    with pytest.raises(ValueError, match="expired leases interval"):
        ExpiredLeases(interval=0)


@pytest.mark.django_db
def test_run_survives_a_database_error_and_retries(worker, monkeypatch, caplog):
    expire(running_task(worker, rn="expired"))
    original = TaskQuerySet.reset_expired
    calls = []

    def flaky(self, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly\n\tHINT: ...")
        return original(self, **kwargs)

    monkeypatch.setattr(TaskQuerySet, "reset_expired", flaky)
    monitor, stop = Monitor(interval=5), threading.Event()
    waits = scripted_wait(monitor, stop, passes=1)
    caplog.set_level(logging.INFO, logger="scylla_django")

    monitor.run(stop=stop)

    assert len(calls) == 2
    assert waits[0] == 1.0  # the first backoff
    assert Monitor.backoff_max <= 1.0  # back within about a second of the database
    assert 0 < waits[1] <= 5  # then the normal interval
    assert Task.objects.get(rn="expired").status == Status.READY
    [warning] = [r for r in caplog.records if r.msg.startswith("monitor pass failed")]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage() == (
        "monitor pass failed (OperationalError: server closed the connection unexpectedly "
        "HINT: ...); retrying in 1 s"
    )
    assert "database back after 1 failed attempt" in caplog.messages


@pytest.mark.django_db
def test_backoff_doubles_up_to_its_cap_and_a_success_resets_it(monkeypatch):
    outcomes = iter([False] * 7 + [True] + [False] + [True])
    monitor, stop = Monitor(interval=5), threading.Event()
    monitor.backoff_max = 30.0

    def run_once(services=None):
        if not next(outcomes):
            raise OperationalError("down")
        monitor.last_pass = MonitorPass(0, 0)
        return monitor.last_pass

    monkeypatch.setattr(monitor, "run_once", run_once)
    waits = scripted_wait(monitor, stop, passes=2)
    monitor.run(stop=stop)
    assert len(waits) == 10
    assert waits[:7] == [1, 2, 4, 8, 16, 30, 30]  # doubling, capped at backoff_max
    assert 0 < waits[7] <= 5  # after a success: the interval
    assert waits[8] == 1  # the success reset the backoff
    assert 0 < waits[9] <= 5


@pytest.mark.django_db
def test_a_stop_during_a_backoff_ends_the_run(monkeypatch):
    """The backoff waits on the stop event: a stop ends it at once (here: before it began)."""
    monitor, stop = Monitor(), threading.Event()

    def down(services=None):
        stop.set()
        raise OperationalError("down")

    monkeypatch.setattr(monitor, "run_once", down)
    monitor.backoff_initial = monitor.backoff_max = 3600.0  # a missed stop waits an hour
    thread = threading.Thread(target=monitor.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_run_replaces_a_broken_connection(worker, monkeypatch, caplog):
    """The real thing: the connection dies under the monitor; the next pass reconnects.

    With persistent connections, `close_old_connections()` keeps a connection that errored if it
    still looks usable (SQLite's always does), so the monitor must close it itself.
    """
    monkeypatch.setitem(connections["default"].settings_dict, "CONN_MAX_AGE", None)
    expire(running_task(worker, rn="expired"))
    original = TaskQuerySet.reset_expired
    broken = []

    def break_first(self, **kwargs):
        if not broken:
            connections["default"].ensure_connection()
            broken.append(connections["default"].connection)
            broken[0].close()  # the DB-API connection, under Django's feet
        return original(self, **kwargs)

    monkeypatch.setattr(TaskQuerySet, "reset_expired", break_first)
    monitor, stop = Monitor(interval=5), threading.Event()
    waits = scripted_wait(monitor, stop, passes=1)
    caplog.set_level(logging.INFO, logger="scylla_django")

    monitor.run(stop=stop)

    assert len(waits) == 2
    assert waits[0] == 1.0
    failed = [r for r in caplog.records if r.msg.startswith("monitor pass failed")]
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING
    assert Task.objects.get(rn="expired").status == Status.READY
    assert connection.connection is not broken[0]


@pytest.mark.django_db
def test_once_raises_database_errors_instead_of_retrying(monkeypatch):
    calls = []

    def down(self, **kwargs):
        calls.append(1)
        raise OperationalError("down")

    monkeypatch.setattr(TaskQuerySet, "reset_expired", down)
    with pytest.raises(OperationalError):
        Monitor().run(once=True)
    assert calls == [1]


# -- the command ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_command_once_prints_a_summary_and_restores_signal_handlers(worker):
    expire(running_task(worker, rn="expired"))
    TaskFactory(rn="old", queue="other").cancel()
    age("old", days=11)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    out = io.StringIO()
    call_command("scylla_monitor", "--once", stdout=out)
    assert out.getvalue() == "reset 1, purged 1\n"
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    out = io.StringIO()
    call_command("scylla_monitor", "--once", "--retention", "1h", stdout=out)
    assert out.getvalue() == "reset 0, purged 0\n"


@pytest.mark.django_db
def test_command_once_fails_loudly_on_a_database_error(monkeypatch):
    def down(self, **kwargs):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(TaskQuerySet, "reset_expired", down)
    with pytest.raises(CommandError, match="OperationalError: could not connect to server"):
        call_command("scylla_monitor", "--once", stdout=io.StringIO())


@pytest.mark.parametrize(
    "args",
    [["--interval", "0"], ["--interval", "soon"], ["--retention", "7x"], ["--retention", "0"]],
)
def test_command_rejects_bad_arguments(args):
    with pytest.raises(CommandError, match=args[0]):
        call_command("scylla_monitor", "--once", *args)


def test_command_help_shows_the_retention_setting(settings):
    settings.SCYLLA = {"RETENTION": timedelta(days=3)}
    text = " ".join(
        MonitorCommand().create_parser("manage.py", "scylla_monitor").format_help().split()
    )
    assert "the RETENTION setting, read at every pass (now 3 d)" in text


@pytest.mark.django_db
def test_command_reports_a_bad_retention_setting(settings):
    settings.SCYLLA = {"RETENTION": -5}
    with pytest.raises(CommandError, match="RETENTION"):
        call_command("scylla_monitor", "--once")


# -- a real process ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_monitor_process_resets_a_lease_and_exits_0_on_sigterm(worker):
    task = running_task(worker, rn="expired")
    expire(task)
    process = start("scylla_monitor", "--interval", "0.2")
    try:
        wait_until(
            lambda: (
                process.poll() is not None
                or History.objects.filter(task=task, typ=EventType.TIMEOUT).exists()
            ),
            timeout=60,
            what="the monitor process to reset the lease",
        )
        assert process.poll() is None
        assert Task.objects.get(pk=task.pk).status == Status.READY
    finally:
        process.send_signal(signal.SIGTERM)
        code, text = finish(process, timeout=60)
    assert code == 0, text
    assert "reset 1 expired lease" in text
    assert "SIGTERM received" in text


@pytest.mark.django_db(transaction=True)
def test_monitor_process_prints_every_threads_stack_on_sigusr1_and_carries_on():
    process = start("scylla_monitor", "--interval", "0.2")
    try:
        wait_until(lambda: "monitor started" in output_so_far(process), what="the start")
        process.send_signal(signal.SIGUSR1)
        wait_until(
            lambda: (
                "monitor/monitor.py" in output_so_far(process)
                and "stops.py" in output_so_far(process)
            ),
            timeout=60,
            what="the stacks of both threads",
        )
        assert process.poll() is None
        assert "stops.py" in output_so_far(process)  # the stop signals' thread, waiting
    finally:
        process.send_signal(signal.SIGTERM)
        code, text = finish(process, timeout=60)
    assert code == 0, text
    assert "SIGTERM received" in text
