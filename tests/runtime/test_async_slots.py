"""Slots without threads: a worker whose handlers are `async def` holds thousands of tasks as
coroutines on its event loop, on a few threads, and cancellation and a graceful stop reach
every one of them (real worker processes)."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from tests.processes import finish, output_so_far, start, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.concurrency,
    pytest.mark.postgres,
]


def worker(*queues: str, concurrency: int, extra: tuple[str, ...] = ()):
    return start(
        "scylla_worker",
        *(f"--queue={q}" for q in queues),
        f"--concurrency={concurrency}",
        "--lease-length=20s",
        "--poll-interval=0.1",
        "--handlers=tests.worker_handlers",
        *extra,
    )


def threads(pid: int) -> int:
    """The threads of process `pid`, as the kernel counts them."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads line")


def statuses(queue: str) -> Counter[str]:
    return Counter(Task.objects.filter(queue=queue).values_list("status", flat=True))


def test_a_worker_holds_2000_async_tasks_on_a_few_threads_cancel_and_sigterm_reach_them():
    # Each handler sleeps in `ctx.sleep()` for a minute at a time: only the stop itself can
    # end it in time for the waits below.
    spec = {"seconds": 300, "step": 60, "wake": True}
    Task.objects.submit_many({"queue": "t-hold", "spec": spec} for _ in range(2000))
    process = worker("t-hold", concurrency=2000)
    try:
        wait_until(lambda: statuses("t-hold")[Status.RUNNING] == 2000, 60, "2,000 running")
        count = threads(process.pid)
        assert count < 50, count

        # Cancel 100 running tasks: every handler is stopped (its sleep raises), nothing is
        # written for it, and its slot is freed.
        cancelled = list(Task.objects.filter(queue="t-hold").values_list("pk", flat=True)[:100])
        assert Task.objects.filter(pk__in=cancelled).cancel() == 100
        rns = set(Task.objects.filter(pk__in=cancelled).values_list("rn", flat=True))

        def stopped() -> set[str]:
            lines = output_so_far(process).splitlines()
            return {rn for rn in rns if any(f"stopped {rn}:" in line for line in lines)}

        wait_until(lambda: stopped() == rns, 30, "the cancelled handlers to stop")
        assert statuses("t-hold") == {Status.RUNNING: 1900, Status.CANCELLED: 100}
    finally:
        process.send_signal(signal.SIGTERM)
    code, output = finish(process, timeout=45)
    assert code == 0, output  # 3 if a handler had still been running after the grace period
    # Every running task was yielded, in one statement, and is ready after the monitor's pass.
    yielded = History.objects.filter(typ=EventType.YIELD, task__queue="t-hold")
    assert yielded.count() == 1900
    assert Task.objects.reset_expired() == 1900
    assert statuses("t-hold") == {Status.READY: 1900, Status.CANCELLED: 100}
    assert not History.objects.filter(typ=EventType.TIMEOUT).exists()


def test_async_and_plain_handlers_in_one_worker_threads_only_for_the_plain_ones(tmp_path):
    # Every handler holds its task until the test releases them all (a file appears): all
    # are running at once however long the worker takes to lease them.
    release = str(tmp_path / "release")
    spec = {"until": release}
    Task.objects.submit_many({"queue": "t-hold", "spec": spec} for _ in range(300))
    Task.objects.submit_many({"queue": "t-sleep", "spec": spec} for _ in range(4))
    process = worker("t-hold", "t-sleep", concurrency=400)
    try:
        wait_until(
            lambda: (
                statuses("t-hold")[Status.RUNNING] == 300
                and statuses("t-sleep")[Status.RUNNING] == 4
            ),
            what="all running",
        )
        count = threads(process.pid)
        assert count < 30, count  # 4 handler threads, no thread per coroutine
        (tmp_path / "release").touch()
        wait_until(
            lambda: (
                statuses("t-hold") == {Status.COMPLETED: 300}
                and statuses("t-sleep") == {Status.COMPLETED: 4}
            ),
            what="all completed",
        )
    finally:
        process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output
    assert set(Task.objects.filter(queue="t-hold").values_list("result", flat=True)) == {"held"}
