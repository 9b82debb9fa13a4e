"""Liveness from real worker processes: SIGKILL makes a worker silent, then dead; a stalled
worker (SIGSTOP) loses its lease to "reset lease now" and writes nothing when it resumes."""

from __future__ import annotations

import signal
import time

import pytest

from scylla_django.enums import EventType, Liveness, Status
from scylla_django.models import History, Task, Worker
from tests.processes import finish, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

HEARTBEAT = 0.3
LEASE = 2.0


def worker_process(lease: float = LEASE):
    return start(
        "scylla_worker",
        "--queue=t-sleep",
        f"--lease-length={lease}s",
        f"--heartbeat-interval={HEARTBEAT}",
        "--poll-interval=0.1",
        "--handlers=tests.worker_handlers",
        "-v",
        "2",
    )


def running_owner(rn: str) -> Worker:
    wait_until(lambda: Task.objects.filter(rn=rn, status=Status.RUNNING).exists(), what="the lease")
    return Worker.objects.get_by_name(Task.objects.get(rn=rn).owner)


def test_a_killed_worker_is_silent_within_two_intervals_and_dead_after_the_lease_length():
    Task.objects.submit("t-sleep", {"seconds": 60}, rn="k")
    process = worker_process()
    try:
        worker = running_owner("k")
        assert worker.heartbeat_interval.total_seconds() == HEARTBEAT
        time.sleep(2 * HEARTBEAT)  # a few touches
        assert worker.current_state() == Liveness.ALIVE
        process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        wait_until(lambda: worker.current_state() != Liveness.ALIVE, timeout=10, what="silent")
        silent_after = time.monotonic() - killed
        assert worker.current_state() == Liveness.SILENT
        wait_until(lambda: worker.current_state() == Liveness.DEAD, timeout=10, what="dead")
        dead_after = time.monotonic() - killed
    finally:
        process.kill()
        finish(process)
    # The last touch was at most one interval before the kill.
    assert silent_after <= 2 * HEARTBEAT + 0.3, silent_after
    assert LEASE - HEARTBEAT - 0.1 <= dead_after <= LEASE + 0.5, dead_after


def test_reset_lease_now_is_fenced_against_a_worker_that_resumes():
    Task.objects.submit("t-sleep", {"seconds": 4}, rn="s")
    process = worker_process(lease=30)  # the lease itself stays valid throughout
    try:
        worker = running_owner("s")
        process.send_signal(signal.SIGSTOP)
        wait_until(lambda: worker.current_state() == Liveness.SILENT, what="silent")
        task = Task.objects.get(rn="s")
        task.reset_lease(worker.name, 1)
        process.send_signal(signal.SIGCONT)
        wait_until(
            lambda: Task.objects.filter(rn="s", status=Status.COMPLETED).exists(),
            timeout=20,
            what="the second attempt to complete",
        )
        process.send_signal(signal.SIGTERM)
        code, output = finish(process)
    finally:
        process.send_signal(signal.SIGCONT)
        process.kill()
    assert code == 0, output
    assert "does not hold lease" in output
    rows = list(History.objects.filter(task__rn="s").values_list("typ", "worker"))
    assert rows == [
        (EventType.ASSIGNMENT, worker.name),
        (EventType.TIMEOUT, worker.name),
        (EventType.ASSIGNMENT, worker.name),
        (EventType.COMPLETION, worker.name),
    ]
    assert Task.objects.get(rn="s").leases == 2
