"""Several worker processes under one parent: `manage.py scylla_worker --processes N`.

`WorkerProcesses` is a plain class; the command builds a `TaskWorker` in each child.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from django.db import connections

logger = logging.getLogger("scylla_django")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

EXIT_RECYCLED = 4
"""A child's exit status when it stopped at a limit of its own (`--max-tasks`,
`--max-memory`): it is replaced at once."""


@contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _past_its_work(signum: int, frame: object) -> None:
    """A child's answer to a stop before its target handles them (never: they are blocked
    until it does) and after (nothing: it is already exiting)."""


class WorkerProcesses:
    """Runs `target` in `processes` forked child processes and supervises them.

    Each child is a worker of its own (it registers itself: its own name, its own threads), for
    handlers that need more than one CPU. `stop()` (the first SIGTERM/SIGINT) passes SIGTERM on
    to every child, which yields its tasks and exits after its grace period; `stop_now()` (the
    second) passes a second SIGTERM, which ends them at once. A child that dies while the
    parent is not stopping (killed, crashed) is replaced after `restart_delay` seconds; one
    that exits with `EXIT_RECYCLED` (at its `--max-tasks` or `--max-memory`) is replaced at
    once; one that exits 0 (`--once`) is done. `run()` returns the highest exit status (a
    recycled child's counts as 0).

    `target` starts with SIGTERM and SIGINT blocked, and unblocks them once it handles them
    (`StopSignals.installed()` does): a stop that comes while it is starting waits for it.
    """

    def __init__(
        self, target: Callable[[], int], processes: int, *, restart_delay: float = 1.0
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self.target = target
        self.processes = processes
        self.restart_delay = restart_delay
        self.stopping = threading.Event()
        self._wakeup = threading.Event()  # a stop: `run()` passes it on at once
        self._stops = 1  # SIGTERMs each child gets once stopping (2: exit at once)
        self._sent: dict[int, int] = {}  # SIGTERMs sent, by child pid
        self._children: dict[int, Any] = {}

    def _spawn(self, slot: int) -> None:
        """Start the child of `slot`, unless a stop came first.

        The child starts with SIGTERM and SIGINT blocked (the mask of the fork), and they stay
        pending until the target handles them (StopSignals unblocks them once its handlers
        are in): a stop that reaches a child while it is still starting is neither lost nor
        fatal. (`run()` passes a stop on to every child in `_children`, this one included.)
        """
        import multiprocessing

        with _stop_signals_blocked():
            if self.stopping.is_set():
                return
            connections.close_all()  # a forked child must open connections of its own
            process = multiprocessing.get_context("fork").Process(
                target=self._child, name=f"scylla-worker-{slot}", daemon=False
            )
            process.start()
            self._children[slot] = process
        logger.info("started worker process %d (pid %s)", slot, process.pid)

    def _child(self) -> None:
        import sys

        # A group of its own: a terminal's Ctrl-C reaches the parent alone, which passes it on
        # once (a child seeing it twice would exit at once).
        os.setpgrp()
        for signum in STOP_SIGNALS:
            # Not the parent's (they write to its pipe). Not SIG_DFL either: the target's own
            # handlers come and go with its work (`StopSignals.installed()`), and put this one
            # back when it ends; a stop that reaches the child after that, on its way out (a
            # recycled child exits as the stop comes), must not kill it: the child has no work
            # left to stop, and would report death by SIGTERM instead of its own status.
            signal.signal(signum, _past_its_work)
        sys.exit(self.target())

    def run(self) -> int:
        """Start the children and supervise them until every one has exited."""
        self._children = {}
        for slot in range(self.processes):
            self._spawn(slot)
        codes: dict[int, int] = {}
        while len(codes) < self.processes:
            self._pass_stops_on()
            for slot in range(self.processes):
                if slot in codes:
                    continue
                process = self._children.get(slot)
                if process is None:  # never started: the stop came first
                    codes[slot] = 0
                    continue
                if process.is_alive():
                    continue
                code = process.exitcode if process.exitcode is not None else 1
                if code == EXIT_RECYCLED:
                    if self.stopping.is_set():
                        codes[slot] = 0
                    else:
                        logger.info(
                            "worker process %d (pid %s) reached its limit; starting another",
                            slot,
                            process.pid,
                        )
                        self._spawn(slot)
                    continue
                if self.stopping.is_set() or code == 0:
                    codes[slot] = code
                    continue
                logger.warning(
                    "worker process %d (pid %s) exited with %s; starting another in %gs",
                    slot,
                    process.pid,
                    code,
                    self.restart_delay,
                )
                if not self.stopping.wait(self.restart_delay):
                    self._spawn(slot)
            self._wakeup.wait(0.1)
            self._wakeup.clear()
        return max((abs(code) if code < 0 else code) for code in codes.values())

    def stop(self) -> None:
        """Stop gracefully: SIGTERM to every child (`run()` sends it). From any thread, not
        from a signal handler (management/stops.py says why)."""
        self.stopping.set()
        self._wakeup.set()

    def stop_now(self) -> None:
        """A second SIGTERM to every child: they exit at once."""
        self._stops = 2
        self.stop()

    def _pass_stops_on(self) -> None:
        """Send each live child as many SIGTERMs as stops were asked for (one, or two),
        counting what each got: a child started after a stop gets it too, and none gets one
        twice. Only `run()` calls this, never a signal handler, so nothing here interleaves."""
        wanted = self._stops if self.stopping.is_set() else 0
        for process in self._children.values():
            if process.pid is None or not process.is_alive():
                continue
            while self._sent.get(process.pid, 0) < wanted:
                self._sent[process.pid] = self._sent.get(process.pid, 0) + 1
                with suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
