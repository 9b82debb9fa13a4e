"""WorkerProcesses: a stop that comes while a child is being started still reaches it."""

from __future__ import annotations

import multiprocessing.process
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from scylla_django.management.stops import StopSignals
from scylla_django.supervisor import EXIT_RECYCLED, WorkerProcesses
from tests.processes import wait_until

pytestmark = [
    pytest.mark.concurrency,
    # The test process may have threads of earlier tests; the children here use none of them.
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


def stop_or_timeout() -> int:
    """A child's target: still starting when the stop comes; 0 once stopped, 7 if never."""
    time.sleep(0.5)
    stop = StopSignals()
    with stop.installed():
        return 0 if stop.requested.wait(120) else 7


def test_a_stop_that_comes_while_a_child_is_forked_reaches_it_once_it_handles_signals(
    monkeypatch,
):
    supervisor = WorkerProcesses(stop_or_timeout, 1)
    start = multiprocessing.process.BaseProcess.start

    def start_then_stop(process):
        start(process)
        # What SIGTERM's handler does if it runs here, in the middle of the spawn: the main
        # thread runs it as soon as any thread of the process took the signal.
        supervisor.stop()

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start_then_stop)
    code = supervisor.run()
    # Not 7 (the stop never reached the child: it waited out its two minutes) nor 15 (it
    # killed the child before it could yield anything).
    assert code == 0


def test_a_stop_that_comes_before_a_replacement_is_forked_starts_none():
    supervisor = WorkerProcesses(stop_or_timeout, 2)
    supervisor.stop()
    assert supervisor.run() == 0
    assert supervisor._children == {}


def recycle_after_its_block(left: str) -> int:
    """A child's target at its limit: it leaves its handled block (as a worker that reached
    `--max-tasks` does), says so in the file `left`, and takes a while to exit, recycled."""
    stop = StopSignals()
    with stop.installed():
        pass
    Path(left).touch()
    time.sleep(2)
    return EXIT_RECYCLED


def test_a_stop_that_comes_while_a_recycled_child_exits_leaves_it_its_own_status(tmp_path):
    """The stop's SIGTERM reaches a child that has left its handled block on its way out:
    it exits as it was going to (recycled, counted as 0), not killed by the signal (15)."""
    left = tmp_path / "left"
    supervisor = WorkerProcesses(partial(recycle_after_its_block, str(left)), 1)
    codes: list[int] = []
    running = threading.Thread(target=lambda: codes.append(supervisor.run()))
    running.start()
    try:
        wait_until(left.exists, what="the child to leave its handled block")
        supervisor.stop()  # run() passes the SIGTERM on to the child still exiting
    finally:
        supervisor.stop()
        running.join(60)
    assert not running.is_alive()
    assert codes == [0]
