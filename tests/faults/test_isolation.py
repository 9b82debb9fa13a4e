"""`scylla_worker --isolation process`, resources and recycling, with real worker processes: a
handler that crashes its process costs its task alone, what each run used is recorded, and a
worker (or a child) past `--max-memory` is replaced."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from tests.processes import descendants, finish, output_so_far, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

FAST = ["--poll-interval", "0.1", "--heartbeat-interval", "0.3", "-v", "2"]
MB = 1024 * 1024


def worker(*queues: str, extra: tuple[str, ...] = ()):
    # A long lease: nothing here waits for one to expire (a dead child's lapses at once), and
    # on a loaded machine a heartbeat may take seconds to be answered; with a short one the
    # worker rightly gives up a task whose lease it can no longer vouch for, and the task
    # these tests expect to see finished stays running.
    return start(
        "scylla_worker",
        *(f"--queue={q}" for q in queues),
        "--lease-length=60s",
        "--handlers=tests.isolation_handlers",
        *FAST,
        *extra,
    )


def isolated(*queues: str, extra: tuple[str, ...] = ()):
    return worker(*queues, extra=("--isolation", "process", *extra))


def test_crashing_handlers_cost_only_their_task_and_the_worker_keeps_serving():
    tasks = [
        Task.objects.submit("i-echo", {"n": 1}, priority=9),
        Task.objects.submit("i-segfault", {}, priority=8),
        Task.objects.submit("i-echo", {"n": 2}, priority=7),
        Task.objects.submit("i-exit", {}, priority=6),
        Task.objects.submit("i-oom", {}, priority=5),
        Task.objects.submit("i-echo", {"n": 3}, priority=4),
    ]
    found = Task.objects.submit("i-lambda", {}, priority=3)
    queues = ("i-echo", "i-segfault", "i-exit", "i-oom", "i-lambda")
    code, output = finish(isolated(*queues, extra=("--max-tasks", "7")), timeout=120)
    assert code == 0, output
    found.refresh_from_db()
    assert found.status == Status.COMPLETED, found.errors
    for task in tasks:
        task.refresh_from_db()
    first, segfault, second, exited, killed, third = tasks
    # A dead child is a worker failure: no outcome, the lease lapsed at once, and the
    # monitor's reset makes each task ready again as it would a dead worker's.
    assert segfault.status == exited.status == killed.status == Status.RUNNING
    assert Task.objects.reset_expired() == 3
    for crashed in (segfault, exited, killed):
        crashed.refresh_from_db()
        assert crashed.status == Status.READY and crashed.errors == []
        typs = History.objects.filter(task=crashed).order_by("pk").values_list("typ", flat=True)
        assert list(typs) == [EventType.ASSIGNMENT, EventType.TIMEOUT]
    assert "exited with status 3" in output
    assert "was killed by SIGKILL" in output
    assert first.status == second.status == third.status == Status.COMPLETED
    assert [t.result["echo"] for t in (first, second, third)] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert first.progress == 1.0
    # Each ran in a child, never in the worker; a crash is followed by a fresh child.
    pids = [t.result["pid"] for t in (first, second, third)]
    assert len(set(pids)) == 3, pids
    assert found.result["pid"] == third.result["pid"]  # the child goes on serving
    assert "killed by SIGSEGV" in output


def test_a_snooze_without_a_delay_in_a_child_waits_its_handler_s_policy():
    """The child reports a snooze with no delay; the worker computes it from the handler's
    snooze policy and the task's snooze count (the second snooze: 5 * 3 seconds)."""
    task = Task.objects.submit("i-snooze", {})
    Task.objects.filter(pk=task.pk).update(snoozes=1)
    code, output = finish(isolated("i-snooze", extra=("--max-tasks", "1")), timeout=120)
    assert code == 0, output
    task.refresh_from_db()
    assert (task.status, task.snoozes) == (Status.READY, 2), task.errors
    assert (task.not_before - task.updated).total_seconds() == 15


def test_a_shutdown_kills_the_children_still_busy_after_the_grace_period():
    hung = Task.objects.submit("i-hang", {})
    process = isolated("i-hang", extra=("--grace-period", "1"))
    wait_until(lambda: "started child process" in output_so_far(process), 60, "a child")
    children = [pid for pid in descendants(process.pid) if "spawn_main" in cmdline(pid)]
    assert children
    process.send_signal(signal.SIGTERM)
    code, output = finish(process, timeout=60)
    # Killed as a stopped task's hung handler, or as one still running when the grace period
    # ended (then abandoned: status 3), whichever comes first: either way, within it.
    assert code in (0, 3), output
    assert "killing its child process" in output or "still running after" in output
    assert Task.objects.get(pk=hung.pk).leases == 1
    for pid in children:
        wait_until(lambda pid=pid: not alive(pid), 5, f"child {pid} gone")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_a_hung_handler_of_a_cancelled_task_is_killed_after_the_grace_period():
    hung = Task.objects.submit("i-hang", {}, priority=9)
    process = isolated("i-hang", "i-echo", extra=("--max-tasks", "2", "--grace-period", "1"))
    wait_until(lambda: Task.objects.get(pk=hung.pk).status == Status.RUNNING, 60, "leased")
    Task.objects.get(pk=hung.pk).cancel()
    after = Task.objects.submit("i-echo", {"n": 1})
    code, output = finish(process, timeout=120)
    assert code == 0, output
    assert "killing its child process" in output
    assert Task.objects.get(pk=hung.pk).status == Status.CANCELLED
    after.refresh_from_db()
    assert after.status == Status.COMPLETED
    assert after.result["pid"] != process.pid


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_cpu_time_and_peak_memory_are_recorded(isolation):
    busy = Task.objects.submit("i-busy", {"seconds": 0.3}, priority=9)
    small = Task.objects.submit("i-echo", {}, priority=8)
    large = Task.objects.submit("i-allocate", {"mb": 50}, priority=7)
    process = worker(
        "i-busy", "i-echo", "i-allocate", extra=("--isolation", isolation, "--max-tasks", "3")
    )
    code, output = finish(process, timeout=120)
    assert code == 0, output
    for task in (busy, small, large):
        task.refresh_from_db()
        assert task.status == Status.COMPLETED, (task.queue, task.errors, output)
    assert 0.2 <= busy.cpu_time < 5, busy.cpu_time
    assert 0 <= small.cpu_time < busy.cpu_time
    if isolation == "thread":  # threads share the worker's memory: not measured
        assert busy.peak_memory is small.peak_memory is large.peak_memory is None
        return
    # Each task's own peak in a reused child: the 50 MB block shows, and is gone after.
    assert 10 * MB < small.peak_memory < 1000 * MB
    assert large.peak_memory - small.peak_memory >= 45 * MB, (small.peak_memory, large.peak_memory)


def test_a_worker_past_max_memory_finishes_its_task_and_exits():
    tasks = [Task.objects.submit("i-leak", {"mb": 40}) for _ in range(20)]
    code, output = finish(worker("i-leak", extra=("--max-memory", "150")), timeout=120)
    assert code == 0, output
    assert "past the limit of 150 MB" in output
    done = Task.objects.filter(pk__in=[t.pk for t in tasks], status=Status.COMPLETED).count()
    assert 1 <= done < 20
    assert Task.objects.filter(status=Status.READY).count() == 20 - done  # none left running


def test_a_supervised_worker_past_max_memory_is_replaced():
    tasks = [Task.objects.submit("i-leak", {"mb": 40}) for _ in range(12)]
    # No prefetch: each process holds only what it runs, so the tasks outlast the first two.
    process = worker("i-leak", extra=("--max-memory", "150", "--processes", "2", "--prefetch", "0"))
    try:
        wait_until(
            lambda: Task.objects.filter(status=Status.COMPLETED).count() == 12,
            150,
            "every task completed",
        )
        wait_until(
            lambda: "reached its limit; starting another" in output_so_far(process),
            30,
            "a worker process replaced",
        )
    finally:
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, timeout=60)
    assert code == 0, output
    pids = {Task.objects.get(pk=t.pk).result["pid"] for t in tasks}
    assert len(pids) > 2, pids  # more than the two processes first started


def test_an_isolated_child_past_max_memory_is_replaced_and_the_worker_goes_on():
    tasks = [Task.objects.submit("i-leak", {"mb": 40}, priority=9 - n) for n in range(6)]
    process = isolated("i-leak", extra=("--max-memory", "150", "--max-tasks", "6"))
    code, output = finish(process, timeout=150)
    assert code == 0, output
    assert "replacing it" in output
    results = [Task.objects.get(pk=t.pk).result for t in tasks]
    pids = [result["pid"] for result in results]
    assert len(set(pids)) >= 2, pids
    assert os.getpid() not in pids and process.pid not in pids
    # A replaced child starts afresh: its first task has leaked once.
    assert results[0]["leaked"] == 1
    assert any(r["leaked"] == 1 for r in results[1:])


@pytest.mark.parametrize(
    "args",
    [
        ("--max-memory", "0"),
        ("--max-memory", "-5"),
        ("--max-memory", "lots"),
        ("--isolation", "container"),
        ("--max-tasks", "0"),
    ],
)
def test_bad_limits_are_command_errors(args):
    with pytest.raises(CommandError):
        call_command("scylla_worker", "--queue", "t-echo", *args, "--once")
