"""Which queues something serves: a live worker that leases from them, or a handler registered
in this process.

A task submitted to a queue that nothing serves (a typo: "emials") is accepted and waits until
a worker for that queue starts. Every submission says so in the log (at most once a minute per
queue, so that a stopped pool of workers does not flood it); the API adds a response header,
the dashboard and `GET /queues/` a warning, and the health checks a failing check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from ..enums import Liveness
from .processes import Worker

logger = logging.getLogger("scylla_django")

#: How long one read of the live workers' queues answers in this process: a submission asks
#: on every call, and a worker that just started is seen a few seconds late.
LIVE_QUEUES_MAX_AGE = 5.0
#: The least time between two log lines about the same unserved queue.
WARNING_INTERVAL = 60.0

_lock = threading.Lock()
_live_queues: dict[str, tuple[float, frozenset[str]]] = {}
_warned: dict[tuple[str, str], float] = {}
_served_here: list[Callable[[str], bool]] = []


def serve_here(served: Callable[[str], bool]) -> None:
    """Count the queues for which `served(queue)` is true as served in this process (the
    handler registry, wired when the app is ready)."""
    with _lock:
        if served not in _served_here:
            _served_here.append(served)


def served_here(queue: str) -> bool:
    """Whether this process has a handler for `queue` (what `serve_here` was given)."""
    return any(served(queue) for served in list(_served_here))


def live_worker_queues(
    using: str = "default", *, max_age: float = LIVE_QUEUES_MAX_AGE
) -> frozenset[str]:
    """The queues that some alive or silent worker leases from, read at most every `max_age` s.

    One small query over the workers that have not stopped; `max_age=0` reads afresh.
    """
    now = time.monotonic()
    with _lock:
        cached = _live_queues.get(using)
    if cached is not None and now - cached[0] < max_age:
        return cached[1]
    rows = (
        Worker.objects.using(using)
        .in_state(Liveness.ALIVE, Liveness.SILENT)
        .values_list("queues", flat=True)
    )
    queues = frozenset(queue for listed in rows if isinstance(listed, list) for queue in listed)
    with _lock:
        _live_queues[using] = (now, queues)
    return queues


def forget_live_worker_queues() -> None:
    """Drop the cached read of the live workers and the memory of warnings already logged."""
    with _lock:
        _live_queues.clear()
        _warned.clear()


def unserved_queues(
    queues: Iterable[str],
    using: str = "default",
    *,
    served: Callable[[str], bool] | None = None,
    max_age: float = LIVE_QUEUES_MAX_AGE,
) -> list[str]:
    """The queues of `queues` that nothing serves: no handler here, no live worker.

    `served` says which queues this process serves (default: what `serve_here` was given).
    It answers first; the workers are read only for the queues it lacks.
    """
    checks = [served] if served is not None else list(_served_here)
    wanted = [q for q in dict.fromkeys(queues) if not any(check(q) for check in checks)]
    if not wanted:
        return []
    live = live_worker_queues(using, max_age=max_age)
    return [queue for queue in wanted if queue not in live]


def unserved_warning(queue: str) -> str:
    """What a user is told about a task submitted to a queue that nothing serves."""
    return (
        f"no live worker serves queue {queue!r} and no handler is registered for it: its "
        "tasks wait until a worker for it starts (is the queue name right?)"
    )


def warn_unserved(queues: Iterable[str], using: str = "default") -> None:
    """Log, for tasks just submitted to `queues`, each queue that nothing serves (at most
    once every `WARNING_INTERVAL` seconds per queue and database)."""
    now = time.monotonic()
    for queue in unserved_queues(queues, using):
        with _lock:
            last = _warned.get((using, queue))
            if last is not None and now - last < WARNING_INTERVAL:
                continue
            _warned[(using, queue)] = now
        logger.warning("task submitted: %s", unserved_warning(queue))
