"""`scylla_worker --reload`: restart the worker when code changes (development only).

Django's autoreloader does the watching: the command runs twice, as a supervisor and as a
child that works. On a change the child stops leasing, yields its running tasks (as on
SIGTERM), records its stop and exits with status 3, and the supervisor starts a new child,
which registers as a new worker. The yielded tasks are made ready by the monitor's next pass.
SIGTERM to the supervisor is passed on to the child, which shuts down gracefully; Ctrl-C
reaches the child from the terminal.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from types import FrameType
from typing import Any

from django.utils import autoreload

from ..worker import TaskWorker

logger = logging.getLogger("scylla_django")


def run_with_reloader(worker: TaskWorker, *, once: bool = False) -> int:
    """Run `worker` in a child process restarted on code changes; return the exit status.

    In the child (Django's autoreload environment variable is set) the worker runs and the
    status is that of its shutdown: 0, or 3 to be restarted.
    """
    if os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true":
        _work(worker, once)
        return 0
    return _supervise()


def _work(worker: TaskWorker, once: bool) -> None:
    reloader = autoreload.get_reloader()
    finished = threading.Event()

    def main() -> None:
        try:
            worker.run(once=once)
        finally:
            finished.set()
            reloader.stop()  # the worker ended by itself (signal, --once): stop watching

    def on_change(sender: Any, file_path: Any, **kwargs: Any) -> None:
        logger.info("%s changed: yielding the running tasks before restarting", file_path)
        worker.stop()
        finished.wait()
        # Returning nothing lets the autoreloader go on: it exits with status 3.

    autoreload.file_changed.connect(on_change, weak=False)
    logger.info("watching for code changes with %s", type(reloader).__name__)
    autoreload.start_django(reloader, main)


def _supervise() -> int:
    """Start the child again each time it exits with status 3; pass SIGTERM on to it."""
    env = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    args = [str(arg) for arg in autoreload.get_child_arguments()]
    while True:
        child = subprocess.Popen(args, env=env, close_fds=False)

        def forward(signum: int, frame: FrameType | None, child: Any = child) -> None:
            child.send_signal(signum)

        previous = {
            signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
            # Ctrl-C reaches the child from the terminal already: a second SIGINT, passed
            # on, would make it exit at once instead of gracefully.
            signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
        }
        try:
            code = child.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if code != 3:
            return code
