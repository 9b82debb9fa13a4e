"""scylla_worker and scylla_monitor as real processes: signals, crashes, cancellation, load."""

from __future__ import annotations

import os
import signal
from collections import Counter
from datetime import timedelta

import pytest

from scylla_django.enums import EventType, Status
from scylla_django.exceptions import LeaseLost
from scylla_django.models import History, Monitor, QueueSetting, Task, Worker
from tests.helpers import typs
from tests.processes import finish, output_so_far, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

FAST = ["--poll-interval", "0.1", "--heartbeat-interval", "0.3", "-v", "2"]


def worker(*queues: str, lease: str = "5s", extra: tuple[str, ...] = ()):
    return start(
        "scylla_worker",
        *(f"--queue={q}" for q in queues),
        f"--lease-length={lease}",
        "--handlers=tests.worker_handlers",
        *FAST,
        *extra,
    )


def statuses() -> Counter[str]:
    return Counter(Task.objects.values_list("status", flat=True))


def test_sigterm_yields_running_tasks_and_another_worker_finishes_them():
    tasks = [Task.objects.submit("t-sleep", {"seconds": 1.5}, rn=f"y{n}") for n in range(3)]
    first = worker("t-sleep", extra=("--concurrency", "3"))
    wait_until(lambda: statuses()[Status.RUNNING] == 3, what="3 running tasks")
    first.send_signal(signal.SIGTERM)
    code, output = finish(first)
    assert code == 0, output
    assert "yielded" in output
    for task in tasks:
        assert typs(task) == [EventType.ASSIGNMENT, EventType.YIELD]
    assert Worker.objects.get_by_name(Task.objects.get(rn="y0").owner).stopped
    assert Task.objects.reset_expired() == 3  # the monitor's next pass
    assert statuses() == {Status.READY: 3}
    assert not History.objects.filter(typ=EventType.TIMEOUT).exists()

    second = worker("t-sleep", extra=("--concurrency", "3", "--once"))
    code, output = finish(second)
    assert code == 0, output
    assert statuses() == {Status.COMPLETED: 3}
    for task in tasks:
        assert typs(task) == [
            EventType.ASSIGNMENT,
            EventType.YIELD,
            EventType.ASSIGNMENT,
            EventType.COMPLETION,
        ]


def test_a_second_signal_exits_at_once(tmp_path):
    started = tmp_path / "started"
    Task.objects.submit("t-stubborn", {"seconds": 60, "started": str(started)})
    process = worker("t-stubborn", extra=("--grace-period", "60"))
    # The handler itself must be running: a task stopped before its handler starts is yielded
    # at once, and the worker is gone before a second signal could reach it.
    wait_until(started.exists, what="the handler's start")
    process.send_signal(signal.SIGTERM)
    wait_until(lambda: History.objects.filter(typ=EventType.YIELD).exists(), what="the yield")
    process.send_signal(signal.SIGTERM)
    code, output = finish(process, timeout=5)
    assert code == 1, output
    assert "exiting now" in output


def test_sigusr1_prints_every_threads_stack_and_the_worker_carries_on():
    task = Task.objects.submit("t-sleep", {"seconds": 60})
    process = worker("t-sleep")
    # Its handler is running (its progress came with a heartbeat), not only leased: the stacks
    # are those of the moment the signal comes.
    wait_until(lambda: Task.objects.get(pk=task.pk).progress > 0, what="the handler's progress")
    process.send_signal(signal.SIGUSR1)
    # The stacks are printed one thread after another: wait for the handler's (in sleep) and
    # the heartbeat thread's, whichever comes last.
    wait_until(
        lambda: all(part in output_so_far(process) for part in ("in sleep", "heartbeat.py")),
        what="the stacks of the handler's thread and the heartbeat's",
    )
    assert Task.objects.get(pk=task.pk).status == Status.RUNNING
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output
    assert typs(task) == [EventType.ASSIGNMENT, EventType.YIELD]


def test_sigkill_leaves_the_lease_to_expire_and_the_monitor_resets_it():
    task = Task.objects.submit("t-sleep", {"seconds": 1})
    victim = worker("t-sleep", lease="1s")
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.RUNNING, what="leased")
    victim_name = Task.objects.get(pk=task.pk).owner
    victim.kill()
    victim.wait()
    wait_until(lambda: Task.objects.reset_expired() == 1, timeout=5, what="the lease to expire")
    task.refresh_from_db()
    assert (task.status, task.owner) == (Status.READY, None)
    assert typs(task) == [EventType.ASSIGNMENT, EventType.TIMEOUT]
    timeout = History.objects.filter(task=task).last()
    assert timeout.worker == victim_name

    code, output = finish(worker("t-sleep", extra=("--once",)))
    assert code == 0, output
    task.refresh_from_db()
    assert task.status == Status.COMPLETED and task.owner != victim_name
    # The killed worker's late writes are rejected and change nothing.
    for late_write in (
        lambda: task.heartbeat(victim_name, progress=0.1),
        lambda: task.complete(victim_name, result="late"),
        lambda: task.abort(victim_name, {"code": "late"}),
    ):
        with pytest.raises(LeaseLost):
            late_write()
    task.refresh_from_db()
    assert (task.status, task.result, task.errors) == (Status.COMPLETED, {"slept": 1}, [])


def test_cancel_reaches_the_handler_within_a_heartbeat_interval():
    task = Task.objects.submit("t-sleep", {"seconds": 60})
    process = worker("t-sleep", extra=("--max-tasks", "1"))
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.RUNNING, what="leased")
    Task.objects.get(pk=task.pk).cancel()
    # The handler sleeps a minute in steps; the cancel reaches it at the next heartbeat (0.3 s),
    # so the process exits long before the sleep would end.
    code, output = finish(process, timeout=40)
    assert code == 0, output
    assert "was cancelled" in output
    assert Task.objects.get(pk=task.pk).status == Status.CANCELLED


def test_handler_errors_and_aborts_are_recorded():
    failing = Task.objects.submit("t-fail", {"n": 1})
    aborting = Task.objects.submit("t-abort", {"day": 4})
    code, output = finish(worker("t-fail", "t-abort", extra=("--concurrency", "2", "--once")))
    assert code == 0, output
    failing.refresh_from_db()
    aborting.refresh_from_db()
    assert failing.status == aborting.status == Status.ABORTED
    assert failing.errors[0]["code"] == "exception"
    assert failing.errors[0]["args"]["type"] == "builtins.ValueError"
    assert aborting.errors == [
        {"code": "empty", "args": {"day": 4}, "description": "no rows matched"}
    ]


def test_max_attempts_aborts_a_task_that_keeps_killing_its_worker(settings):
    settings.SCYLLA = {"MAX_LEASES": 2}
    task = Task.objects.submit("t-kill", {})
    for attempt in (1, 2):
        code, _ = finish(worker("t-kill", lease="1s", extra=("--once",)))
        assert code == -signal.SIGKILL
        assert Task.objects.get(pk=task.pk).leases == attempt
        wait_until(lambda: Task.objects.reset_expired() == 1, timeout=5, what="expiry")
    task.refresh_from_db()
    assert task.status == Status.ABORTED
    assert task.errors[0]["code"] == "max_leases_exceeded"
    assert typs(task)[-2:] == [EventType.TIMEOUT, EventType.ABORT]


def test_two_workers_and_two_monitors_complete_every_task_exactly_once(tmp_path):
    path = tmp_path / "runs.log"
    # Each task takes 20 ms: one worker alone needs 2.5 s for the 500, while no-op tasks were
    # all done (up to 68 a lease) by the first worker to lease before the other's next try (on
    # SQLite the other may be waiting out a write lock).
    spec = {"path": str(path), "sleep": 0.02}
    outcomes = Task.objects.submit_many(
        [{"queue": "t-record", "spec": spec, "rn": f"r{n}"} for n in range(500)]
    )
    assert all(o.outcome == "inserted" for o in outcomes)
    # Paused until every process is up: the first worker started would otherwise run tasks
    # before the second is there to take part.
    QueueSetting.objects.pause("t-record")
    options = ("--concurrency", "4")
    processes = [
        worker("t-record", extra=options),
        worker("t-record", extra=options),
        start("scylla_monitor", "--interval", "0.2"),
        start("scylla_monitor", "--interval", "0.2"),
    ]
    try:
        # Every process is up (registered, its stop signals handled) before any is stopped: one
        # still starting when the tasks are all done would die of the SIGTERM.
        pids = {process.pid for process in processes}
        wait_until(
            lambda: (
                {*Worker.objects.values_list("pid", flat=True)}
                | {*Monitor.objects.values_list("pid", flat=True)}
                >= pids
            ),
            timeout=60,
            what="every process registered",
        )
        QueueSetting.objects.resume("t-record")
        wait_until(
            lambda: statuses()[Status.COMPLETED] == 500, timeout=120, what="500 completed tasks"
        )
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        results = [finish(process) for process in processes]
    for code, output in results:
        assert code == 0, output
    runs = Counter(line.split()[0] for line in path.read_text().splitlines())
    assert len(runs) == 500
    assert set(runs.values()) == {1}, [rn for rn, n in runs.items() if n > 1]
    assert set(Task.objects.values_list("leases", flat=True)) == {1}
    owners = Counter(Task.objects.values_list("owner", flat=True))
    assert len(owners) == 2, owners  # both workers took part
    assert History.objects.filter(typ=EventType.ASSIGNMENT).count() == 500
    assert not History.objects.filter(typ=EventType.TIMEOUT).exists()


def test_a_worker_survives_the_database_going_away_briefly(settings):
    """Closing the worker's connections from the server side: it reconnects and carries on."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("terminating backends is a PostgreSQL feature")
    process = worker("t-echo")
    wait_until(lambda: Worker.objects.filter(stopped__isnull=True).exists(), what="registered")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    task = Task.objects.submit("t-echo", {"after": "outage"})
    wait_until(
        lambda: Task.objects.get(pk=task.pk).status == Status.COMPLETED,
        timeout=15,
        what="the task leased after the outage",
    )
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output


def test_lease_deadlines_use_the_database_clock():
    """A reservation first, then, once a heartbeat reported the handler's start, a lease of
    the worker's length: both from the database's clock."""
    task = Task.objects.submit("t-sleep", {"seconds": 60})
    process = worker("t-sleep", lease="7s")
    wait_until(
        lambda: Task.objects.filter(pk=task.pk, status=Status.RUNNING, handler_started=True),
        what="the start reported",
    )
    running = Task.objects.get(pk=task.pk)
    assert running.status == Status.RUNNING
    assert running.deadline - running.updated == timedelta(seconds=7)
    task.cancel()
    process.send_signal(signal.SIGTERM)
    assert finish(process)[0] == 0


def test_processes_run_a_worker_each_and_pass_signals_on():
    tasks = [Task.objects.submit("t-sleep", {"seconds": 60}, rn=f"p{n}") for n in range(4)]
    parent = worker("t-sleep", extra=("--processes", "2", "--concurrency", "2"))
    wait_until(lambda: statuses()[Status.RUNNING] == 4, what="4 running tasks")
    live = Worker.objects.filter(stopped__isnull=True)
    assert live.count() == 2
    assert len({w.pid for w in live}) == 2 and parent.pid not in {w.pid for w in live}
    assert len(set(Task.objects.values_list("owner", flat=True))) == 2

    # A child that dies is replaced by a new worker; its task's lease simply runs out.
    victim = live.first()
    os.kill(victim.pid, signal.SIGKILL)
    wait_until(
        lambda: Worker.objects.filter(stopped__isnull=True).exclude(pk=victim.pk).count() == 2,
        what="a replacement worker process",  # a new process: the default minute
    )
    parent.send_signal(signal.SIGTERM)
    code, output = finish(parent, timeout=30)
    assert code == 0, output
    assert not Worker.objects.filter(stopped__isnull=True).exclude(pk=victim.pk).exists()
    yielded = [t for t in tasks if typs(t)[-1] == EventType.YIELD]
    assert len(yielded) == 2, output  # the survivor's two; the victim's wait for their lease
