"""WorkerProcesses: a stop that comes while a child is being started still reaches it."""

from __future__ import annotations

import multiprocessing.process
import time

import pytest

from scylla_django.management.stops import StopSignals
from scylla_django.supervisor import WorkerProcesses

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
