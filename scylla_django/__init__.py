"""scylla_django: a reliable task scheduler in your Django project's own database.

Clients submit tasks; workers lease, heartbeat and finish them; a monitor resets expired leases
and purges old terminal tasks. See the README for a tour.
"""

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from .exceptions import TIMED_OUT, Abort, Snooze, WaitTimedOut
from .handlers import handler
from .retries import Exponential, Fixed, Retry

__all__ = [
    "TIMED_OUT",
    "Abort",
    "Exponential",
    "Fixed",
    "Retry",
    "Snooze",
    "WaitTimedOut",
    "emit",
    "handler",
    "lock",
]


def emit(kind: str, payload: Mapping[str, Any] | None = None, using: str | None = None) -> Any:
    """Store an event (`scylla_django.emit("partition.added", {"dataset": "sales"})`) in the
    current transaction, for the schedules whose trigger listens to it. See `events.emit`."""
    from .schedules import events  # the models load once the apps are ready

    return events.emit(kind, payload, using)


def lock(name: str, **options: Any) -> AbstractContextManager[int]:
    """Hold lock `name` around a block of code outside tasks (`with scylla_django.lock(
    "invoice:7", ttl=60): ...`): the same locks as `submit(locks=...)`. See
    `models.keys.lock` for the options (`shared`, `ttl`, `wait`, `using`)."""
    from .models import keys  # the models load once the apps are ready

    return keys.lock(name, **options)


__version__ = "0.1.0"
