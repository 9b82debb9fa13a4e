"""Stop signals for the long-running commands: SIGTERM and SIGINT, handled off the main thread.

A Python signal handler runs in the main thread, between two of its bytecodes, wherever that
thread happens to be: maybe inside `Event.wait()`, holding the event's lock, or in the middle
of writing a log line. A handler that sets that Event takes its lock again in the same thread,
and the process hangs for good (a monitor stopped at the moment it entered its wait did); one
that logs may enter the stream's write inside that write. So the handlers here do one thing
that takes no lock, writing the signal's number to a pipe, and a thread of their own reads it
and does the rest.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType

from ..supervisor import STOP_SIGNALS

logger = logging.getLogger("scylla_django")

_DONE = 0
"""Written to the pipe when the block ends; no signal has the number 0."""


@contextmanager
def relayed_signals(handle: Callable[[int], None]) -> Iterator[None]:
    """Within the block, answer each SIGTERM/SIGINT by calling `handle(signum)` on a thread.

    The thread is the only caller of `handle`, one signal after the other, so `handle` may
    take locks, log and set events. Leaving the block restores the previous handlers, then
    lets the thread finish what it was given. Signals blocked at the start (a child of
    --processes starts so) are unblocked once handled: one that came meanwhile is delivered.
    Handlers can be set only from the main thread; elsewhere nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def write(signum: int, frame: FrameType | None) -> None:
        # Thousands of signals unread (the pipe is full): one more changes nothing.
        with suppress(BlockingIOError):
            os.write(write_end, bytes([signum]))

    def relay() -> None:
        # Left to the main thread, whose waits a signal interrupts (the kernel gives a
        # process's signal to any thread not blocking it).
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        while True:
            for signum in os.read(read_end, 64):
                if signum == _DONE:
                    return
                try:
                    handle(signum)
                except Exception:  # a broken handler must not leave the next signal unheard
                    logger.exception("handling %s failed", signal.Signals(signum).name)

    thread = threading.Thread(target=relay, name="scylla-stop-signals", daemon=True)
    thread.start()
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, write)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        # Not the end of the pipe: a process forked meanwhile holds the write end too.
        os.set_blocking(write_end, True)
        os.write(write_end, bytes([_DONE]))  # after what is left unread
        thread.join()
        os.close(write_end)
        os.close(read_end)


class StopSignals:
    """First SIGTERM/SIGINT: set `requested` and call `on_stop` (graceful). Second: exit at
    once with status 1.

    `requested` is an Event the loops wait on. Both run on the thread of `relayed_signals()`,
    never in a signal handler.
    """

    def __init__(self, on_stop: Callable[[], None] | None = None) -> None:
        self.requested = threading.Event()
        self._on_stop = on_stop

    @contextmanager
    def installed(self) -> Iterator[StopSignals]:
        """Handle SIGTERM/SIGINT within the block, then restore the previous handlers.

        From a thread other than the main one (a command called from a thread) nothing is
        installed and only `on_stop`/`requested` stop the work.
        """
        with relayed_signals(self._handle):
            yield self

    def _handle(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.requested.is_set():
            logger.warning("second %s: exiting now", name)
            sys.stderr.flush()
            os._exit(1)
        logger.info("%s received: stopping gracefully (send it again to exit now)", name)
        self.requested.set()
        if self._on_stop is not None:
            self._on_stop()


def print_stacks_on_sigusr1() -> None:
    """`kill -USR1 <pid>` prints every thread's stack to stderr: where a stuck process is.

    The stacks are written by faulthandler, straight to the file descriptor, without the
    locks of Python's streams. They are written from a Python handler, in the main thread and
    with the GIL held, while the other threads stand still: faulthandler's own C handler reads
    the other threads' frames while they run, and a frame that changed under it crashed the
    process. The children of --processes inherit the handler. From a thread other than the
    main one nothing is installed.
    """
    if not hasattr(signal, "SIGUSR1") or sys.__stderr__ is None:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    stream = sys.__stderr__

    def print_stacks(signum: int, frame: FrameType | None) -> None:
        faulthandler.dump_traceback(file=stream, all_threads=True)

    signal.signal(signal.SIGUSR1, print_stacks)
