"""StopSignals: a stop is heard wherever the main thread is when the signal comes.

Each case runs in a process of its own: the signal goes to that process, and a hang there
fails the test at its timeout instead of hanging the suite.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.concurrency

PRELUDE = """
import logging, os, signal, sys, threading, time
from scylla_django.management.stops import StopSignals
logger = logging.getLogger("scylla_django")
logger.setLevel(logging.INFO)
logger.addHandler(logging.StreamHandler(sys.stderr))
"""


def run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
    )


def test_a_stop_that_comes_while_the_main_thread_holds_the_events_lock_is_heard():
    """The main thread is where `Event.wait()` is between taking the event's lock and
    waiting (or after waking): a handler that set the event there took the lock again in the
    same thread and hung for good, as a monitor stopped at the end of a pass did."""
    result = run(
        """
        stop = StopSignals()
        with stop.installed():
            with stop.requested._cond:  # what Event.wait() holds around its wait
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(10_000):  # the handler runs at one of these bytecodes
                    pass
                time.sleep(0.2)
                assert not stop.requested.is_set()
            sys.exit(0 if stop.requested.wait(5) else 7)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "SIGTERM received: stopping gracefully" in result.stderr


def test_a_stop_that_comes_while_the_main_thread_logs_is_heard():
    """The handler's own log line goes through the logging handler whose lock the main
    thread holds: it waits for the main thread, which then goes on."""
    result = run(
        """
        stop = StopSignals()
        with stop.installed():
            handler = logger.handlers[0]
            with handler.lock:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
            sys.exit(0 if stop.requested.wait(5) else 7)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "SIGINT received" in result.stderr


def test_on_stop_runs_once_and_a_second_signal_exits_at_once_with_status_1():
    result = run(
        """
        calls = []
        called = threading.Event()  # `requested` is set before on_stop runs: wait for on_stop
        stop = StopSignals(on_stop=lambda: (calls.append(1), called.set()))
        with stop.installed():
            os.kill(os.getpid(), signal.SIGTERM)
            if not called.wait(5) or calls != [1]:
                sys.exit(8)  # not 1, the status the second signal is to give
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        sys.exit(7)
        """
    )
    assert result.returncode == 1, result.stderr
    assert "second SIGTERM: exiting now" in result.stderr


def test_leaving_the_block_restores_the_previous_handlers():
    result = run(
        """
        heard = []
        signal.signal(signal.SIGTERM, lambda signum, frame: heard.append(signum))
        stop = StopSignals()
        with stop.installed():
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        sys.exit(0 if heard == [signal.SIGTERM] and not stop.requested.is_set() else 7)
        """
    )
    assert result.returncode == 0, result.stderr
