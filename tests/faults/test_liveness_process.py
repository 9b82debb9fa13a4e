"""Liveness from real worker processes: SIGKILL makes a worker silent, then dead; a stalled
worker (SIGSTOP) loses its lease to "reset lease now" and writes nothing when it resumes."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest

from scylla_django.db.clock import read_clock
from scylla_django.enums import EventType, Liveness, Status
from scylla_django.models import History, Task, Worker
from tests.processes import finish, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

HEARTBEAT = 0.3
LEASE = 2.0
MS = timedelta(milliseconds=1)


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


def test_a_killed_worker_is_silent_two_intervals_and_dead_a_lease_length_after_its_last_touch():
    Task.objects.submit("t-sleep", {"seconds": 60}, rn="k")
    process = worker_process()
    try:
        worker = running_owner("k")
        assert worker.heartbeat_interval.total_seconds() == HEARTBEAT
        seen = Worker.objects.get(pk=worker.pk).last_seen
        wait_until(lambda: Worker.objects.get(pk=worker.pk).last_seen > seen, what="a touch")
        assert worker.current_state() == Liveness.ALIVE
        process.send_signal(signal.SIGKILL)
        process.wait(60)
        killed = read_clock("default")  # on the database clock, after the process is gone
        states = [Liveness.ALIVE.value]

        def dead() -> bool:
            state = worker.current_state()
            if state != states[-1]:
                states.append(state)
            return state == Liveness.DEAD

        wait_until(dead, what="dead")
    finally:
        process.kill()
        finish(process)
    # Liveness runs in this order, and its moments stand on the last touch, all on the
    # database clock: silent two intervals after it, dead a lease length after it.
    assert states in (["alive", "silent", "dead"], ["alive", "dead"]), states
    last = Worker.objects.get(pk=worker.pk)
    assert last.last_seen <= killed
    assert last.silent_at - last.last_seen == pytest.approx(
        timedelta(seconds=2 * HEARTBEAT), abs=MS
    )
    assert last.dead_at - last.last_seen == pytest.approx(timedelta(seconds=LEASE), abs=MS)


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
