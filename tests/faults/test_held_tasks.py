"""Thousands of long-running `async def` tasks held by two worker processes beside a monitor
(the CI-sized run of benchmarks/concurrent_tasks.py): every lease is kept with time to spare,
the monitor resets none of them, the workers stay on a few threads, and after a SIGTERM every
task is ready again."""

from __future__ import annotations

import signal
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.db.models import Max, Min

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from tests.processes import finish, start, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.concurrency,
    pytest.mark.postgres,
    pytest.mark.slow,
]

TASKS = 10_000
WORKERS = 2
#: Seconds: heartbeats every quarter of it, each one statement per worker. Long enough that a
#: worker starved of the CPU by a busy machine for a few seconds still renews in time.
LEASE = 20.0


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def least_slack() -> float:
    """The least `deadline - now` of the running tasks, in seconds, on the database clock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM min(deadline) - clock_timestamp()) "
            f"FROM {Task._meta.db_table} WHERE status = 'running'"
        )
        return float(cursor.fetchone()[0])


def earliest_deadline() -> datetime:
    return Task.objects.filter(status=Status.RUNNING).aggregate(at=Min("deadline"))["at"]


def latest_deadline() -> datetime:
    return Task.objects.filter(status=Status.RUNNING).aggregate(at=Max("deadline"))["at"]


def test_10000_held_tasks_keep_their_leases_and_are_all_ready_after_sigterm():
    spec = {"seconds": 600, "step": 60, "wake": True}
    Task.objects.submit_many({"queue": "t-hold", "spec": spec} for _ in range(TASKS))
    monitor = start("scylla_monitor", "--interval=1")
    workers = [
        start(
            "scylla_worker",
            "--queue=t-hold",
            f"--concurrency={TASKS // WORKERS}",
            f"--lease-length={LEASE:g}s",
            "--handlers=tests.worker_handlers",
        )
        for _ in range(WORKERS)
    ]
    try:
        running = Task.objects.filter(status=Status.RUNNING)
        wait_until(lambda: running.count() == TASKS, 120, f"{TASKS} running")
        # Until every deadline is a lease length and a half past the latest one of the first
        # leases (each renewed some six times, on the database clock), no lease runs out.
        slack, most_threads = [LEASE], [0]
        renewed_to = latest_deadline() + timedelta(seconds=1.5 * LEASE)

        def renewed() -> bool:
            slack[0] = min(slack[0], least_slack())
            most_threads[0] = max(most_threads[0], *(threads(w.pid) for w in workers))
            return earliest_deadline() >= renewed_to

        wait_until(renewed, 180, "every lease renewed a lease length and a half ahead")
        [slack], [most_threads] = slack, most_threads
        assert slack > 0, slack
        assert most_threads < 30, most_threads
        assert running.count() == TASKS
        assert not History.objects.filter(typ=EventType.TIMEOUT).exists()  # no false reset
    finally:
        for process in workers:
            process.send_signal(signal.SIGTERM)
    for process in workers:
        code, output = finish(process, timeout=30)
        assert code == 0, output[-3000:]
    try:
        ready = Task.objects.filter(status=Status.READY)
        wait_until(lambda: ready.count() == TASKS, 60, "every task ready again")
        assert History.objects.filter(typ=EventType.YIELD).count() == TASKS
        assert not History.objects.filter(typ=EventType.TIMEOUT).exists()
    finally:
        monitor.send_signal(signal.SIGTERM)
        finish(monitor)
