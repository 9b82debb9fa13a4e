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


@contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class WorkerProcesses:
    """Runs `target` in `processes` forked child processes and supervises them.

    Each child is a worker of its own (it registers itself: its own name, its own threads), for
    handlers that need more than one CPU. `stop()` (the first SIGTERM/SIGINT) passes SIGTERM on
    to every child, which yields its tasks and exits after its grace period; `stop_now()` (the
    second) passes a second SIGTERM, which ends them at once. A child that dies while the
    parent is not stopping (killed, crashed) is replaced after `restart_delay` seconds; one
    that exits 0 (`--once`, `--max-tasks`) is done. `run()` returns the highest exit status.

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
        self._children: dict[int, Any] = {}

    def _spawn(self, slot: int) -> None:
        """Start the child of `slot`, unless a stop came first.

        SIGTERM and SIGINT are blocked meanwhile: a stop arriving during the fork is handled
        after the child is in `_children`, so it reaches the child too. The child starts with
        them still blocked, and they stay pending until the target handles them (StopSignals
        unblocks them once its handlers are in), so a stop that reaches a child while it is
        still starting is neither lost nor fatal.
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
            signal.signal(signum, signal.SIG_DFL)  # not the parent's; the target installs its own
        sys.exit(self.target())

    def run(self) -> int:
        """Start the children and supervise them until every one has exited."""
        self._children = {}
        for slot in range(self.processes):
            self._spawn(slot)
        codes: dict[int, int] = {}
        while len(codes) < self.processes:
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
            self.stopping.wait(0.1)
        return max((abs(code) if code < 0 else code) for code in codes.values())

    def stop(self) -> None:
        """Pass a graceful stop (SIGTERM) on to every child (safe from a signal handler)."""
        self.stopping.set()
        self._signal_children()

    def stop_now(self) -> None:
        """Pass a second SIGTERM on: the children exit at once."""
        self._signal_children()

    def _signal_children(self) -> None:
        for process in self._children.values():
            if process.is_alive() and process.pid is not None:
                with suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
