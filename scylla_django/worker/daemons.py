"""The worker's own threads are daemon threads: none of them keeps the process alive after a
shutdown's grace period (a handler that ignores `ctx.check()` included: its task was yielded
already)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def start_daemon(target: Callable[[], None], name: str) -> threading.Thread:
    """Start `target` on a daemon thread named `name`."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread
