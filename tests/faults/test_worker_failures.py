"""Worker failures are one thing in both execution modes: a child process killed under
`--isolation process` and a worker killed or frozen in thread mode each leave a lost lease,
which the monitor resets (TaskTimeout, back to ready) and, at `MAX_LEASES`, aborts with
`max_leases_exceeded`; with real worker processes, killed with real signals."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from scylla_django import Fixed, Retry
from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from tests.processes import descendants, finish, output_so_far, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

FAST = ["--poll-interval", "0.1", "--heartbeat-interval", "0.3", "-v", "2"]
FAILED_TWICE = [
    EventType.ASSIGNMENT,
    EventType.TIMEOUT,
    EventType.ASSIGNMENT,
    EventType.TIMEOUT,
    EventType.ABORT,
]


def worker(*extra: str, lease: str = "1s") -> subprocess.Popen:
    """A worker on a short lease: a killed or frozen worker's lease lapses at its deadline.
    (A dead child's lease lapses at once, whatever its length.)"""
    return start(
        "scylla_worker",
        "--queue=i-hang",
        f"--lease-length={lease}",
        "--handlers=tests.isolation_handlers",
        *FAST,
        *extra,
    )


def leased(task: Task, lease: int) -> bool:
    task.refresh_from_db()
    return task.status == Status.RUNNING and task.leases == lease


def started(task: Task, lease: int) -> bool:
    """Leased, and the database knows its handler started (its heartbeat reported it): the
    lease counts toward MAX_LEASES if it is lost (a reservation's expiry would not)."""
    return leased(task, lease) and task.handler_started


def children(process: subprocess.Popen) -> list[int]:
    """The child processes of `--isolation process` under `process`."""
    return [pid for pid in descendants(process.pid) if "spawn_main" in cmdline(pid)]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def kill_child(process: subprocess.Popen, dead: set[int]) -> int:
    """SIGKILL the child process running the worker's task (not one killed before), once it
    has started (Django set up in it, the task sent)."""
    wait_until(
        lambda: output_so_far(process).count("started child process") > len(dead),
        what="a child started",
    )
    found: list[int] = []
    wait_until(lambda: found.extend(set(children(process)) - dead) or found, what="a child")
    pid = found[0]
    os.kill(pid, signal.SIGKILL)
    dead.add(pid)
    return pid


def reset_once() -> None:
    """The monitor's pass that finds the lost lease (it lapses at once for a dead child, at
    its deadline for a dead or frozen worker)."""
    wait_until(lambda: Task.objects.reset_expired() == 1, what="the lost lease reset")


def shape(task: Task) -> list[str]:
    return list(
        History.objects.filter(task=task).order_by("time", "pk").values_list("typ", flat=True)
    )


def fail_twice_in_a_child() -> tuple[Task, str]:
    task = Task.objects.submit("i-hang", {})
    process = worker("--isolation", "process", lease="60s")
    dead: set[int] = set()
    try:
        # Started, not only leased: a lease lost before the heartbeat reports its handler's
        # start is a reservation's, forgiven (made ready, not counted toward MAX_LEASES).
        wait_until(lambda: started(task, 1), what="the first lease started")
        kill_child(process, dead)
        reset_once()
        wait_until(lambda: started(task, 2), what="the second lease started, same worker")
        kill_child(process, dead)
        reset_once()
        assert process.poll() is None  # the worker survived both
    finally:
        process.send_signal(signal.SIGTERM)
    code, output = finish(process, timeout=120)
    assert code == 0, output
    assert "was killed by SIGKILL; its lease is left to lapse" in output, output
    return task, output


def fail_twice_in_thread_mode() -> tuple[Task, str]:
    task = Task.objects.submit("i-hang", {})
    outputs = []
    for lease, sig in ((1, signal.SIGKILL), (2, signal.SIGSTOP)):
        process = worker()
        try:
            wait_until(lambda lease=lease: started(task, lease), what=f"lease {lease} started")
            process.send_signal(sig)  # killed, then frozen: the lease is lost either way
            reset_once()
        finally:
            process.send_signal(signal.SIGCONT)
            process.kill()
        outputs.append(finish(process, timeout=60)[1])
    return task, "\n".join(outputs)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_lost_lease_and_a_killed_child_end_alike(settings, mode):
    """Without a retry policy: the first failure makes the task ready again (TaskTimeout),
    the second, at MAX_LEASES=2, aborts it with `max_leases_exceeded`; the History rows are
    the same in both modes."""
    settings.SCYLLA = {"MAX_LEASES": 2}
    run = fail_twice_in_a_child if mode == "process" else fail_twice_in_thread_mode
    task, output = run()
    task.refresh_from_db()
    assert task.status == Status.ABORTED, output
    assert task.errors[0]["code"] == "max_leases_exceeded"
    assert task.errors[0]["args"] == {"max_leases": 2}
    assert shape(task) == FAILED_TWICE
    assert task.leases == 2


def test_a_killed_child_is_retried_under_the_policy_s_crashes(settings):
    """`Retry(crashes=True)` follows the abort at MAX_LEASES with a new attempt, whichever
    mode failed."""
    settings.SCYLLA = {"MAX_LEASES": 1}
    task = Task.objects.submit("i-hang", {}, retry=Retry(max_attempts=2, backoff=Fixed(3600)))
    process = worker("--isolation", "process", lease="60s")
    try:
        wait_until(lambda: started(task, 1), what="the lease started")  # see above
        kill_child(process, set())
        reset_once()
    finally:
        process.send_signal(signal.SIGTERM)
    code, output = finish(process, timeout=120)
    assert code == 0, output
    chain = list(Task.objects.filter(root=task.rn).order_by("attempt"))
    assert [(t.attempt, t.status) for t in chain] == [(1, Status.ABORTED), (2, Status.READY)]
    assert chain[0].errors[0]["code"] == "max_leases_exceeded"
