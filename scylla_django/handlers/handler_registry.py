"""The registry of handlers: which function runs the tasks of each queue, with the run-time
limit, bundling, snooze policy and CPU limit its `@handler` gave; `autodiscover()` fills it
from every installed app's `handlers.py`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.utils.module_loading import autodiscover_modules

from .. import retries
from ..conf import scylla_settings
from ..notify import NOTIFY_QUEUE
from ..validation import validate_delay, validate_queue, validate_timeout

if TYPE_CHECKING:
    from ..models import Task
    from .context import TaskContext

Handler = Callable[["TaskContext"], Any]


class HandlerAlreadyRegistered(Exception):
    """Two different functions were registered for one queue."""


class HandlerRegistry:
    """Maps queue names to the function that runs their tasks."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._timeouts: dict[str, timedelta] = {}
        self._bundling: dict[str, Bundling] = {}
        self._snoozes: dict[str, retries.Backoff] = {}
        self._cpu_limits: dict[str, timedelta] = {}

    def register(self, queue: str, func: Handler) -> None:
        queue = validate_queue(queue)
        existing = self._handlers.get(queue)
        if existing is not None and qualname(existing) != qualname(func):
            raise HandlerAlreadyRegistered(
                f"Queue {queue!r} already has the handler {qualname(existing)}; "
                f"cannot register {qualname(func)} too."
            )
        self._handlers[queue] = func

    def get(self, queue: str) -> Handler | None:
        return self._handlers.get(queue)

    def set_timeout(self, queue: str, timeout: timedelta | None) -> None:
        """Make `timeout` the run-time limit of `queue`'s tasks that set none (None: unset)."""
        queue = validate_queue(queue)
        if timeout is None:
            self._timeouts.pop(queue, None)
        else:
            self._timeouts[queue] = timeout

    def timeout_of(self, task: Task) -> timedelta | None:
        """The run-time limit of `task`: its own `timeout`, else its handler's, else its
        queue's (`SCYLLA['TIMEOUTS']`), else None (no limit)."""
        if task.timeout is not None:
            return task.timeout
        return self.queue_timeout(task.queue)

    def queue_timeout(self, queue: str) -> timedelta | None:
        """The run-time limit of `queue`'s tasks that set none: its handler's, else the
        queue's (`SCYLLA['TIMEOUTS']`), else None (no limit)."""
        return self._timeouts.get(queue) or scylla_settings.TIMEOUTS.get(queue)

    def queue_timeouts(self, queues: Sequence[str]) -> dict[str, timedelta | None]:
        """`queue_timeout` of each of `queues`: what a lease of them is given (`timeouts`)."""
        configured = scylla_settings.TIMEOUTS  # read once: it is parsed on every access
        return {queue: self._timeouts.get(queue) or configured.get(queue) for queue in queues}

    def set_bundling(self, queue: str, bundling: Bundling | None) -> None:
        """Make `queue`'s handler a bundle handler (None: a plain one)."""
        queue = validate_queue(queue)
        if bundling is None:
            self._bundling.pop(queue, None)
        else:
            self._bundling[queue] = bundling

    def bundling_of(self, queue: str) -> Bundling | None:
        """How `queue`'s tasks are bundled, if its handler takes bundles."""
        return self._bundling.get(queue)

    def set_snooze(self, queue: str, backoff: retries.Backoff | None) -> None:
        """Make `backoff` the snooze policy of `queue`'s handler (None: unset)."""
        queue = validate_queue(queue)
        if backoff is None:
            self._snoozes.pop(queue, None)
        else:
            self._snoozes[queue] = backoff

    def snooze_delay(self, task: Task) -> timedelta:
        """How long `task` waits for a snooze without a delay (`raise Snooze()`): what its
        handler's snooze policy says for its next snooze, number `task.snoozes + 1`.
        ValidationError `invalid_delay` if its handler has no snooze policy."""
        backoff = self._snoozes.get(task.queue)
        if backoff is None:
            raise ValidationError(
                f"A snooze without a delay needs a snooze policy on the handler of queue "
                f"{task.queue!r}: @handler({task.queue!r}, snooze=Exponential(...)) or "
                "snooze=Fixed(seconds).",
                code="invalid_delay",
            )
        return validate_delay(backoff.delay(task.snoozes + 1))

    def set_cpu_limit(self, queue: str, limit: timedelta | None) -> None:
        """Make `limit` the CPU time a run of `queue`'s handler may use under `--isolation
        process` (None: unset)."""
        queue = validate_queue(queue)
        if limit is None:
            self._cpu_limits.pop(queue, None)
        else:
            self._cpu_limits[queue] = limit

    def cpu_limit_of(self, queue: str) -> timedelta | None:
        """The CPU time a run of `queue`'s handler may use in its child process, if limited."""
        return self._cpu_limits.get(queue)

    def serves(self, queue: str) -> bool:
        """Whether a handler is registered for `queue`."""
        return queue in self._handlers

    def queues(self) -> list[str]:
        return sorted(self._handlers)


@dataclass(frozen=True)
class Bundling:
    """A bundle handler's bundles: up to `size` tasks, leased once one is ready and `wait`
    has passed or `size` are ready, whichever comes first."""

    size: int
    wait: timedelta

    #: The largest bundle: one lease statement, one heartbeat, one outcome write for all.
    MAX_SIZE = 1000

    @classmethod
    def of(cls, size: object, wait: object) -> Bundling | None:
        """The bundling `@handler(bundle_size=…, bundle_wait=…)` asks for (None: no bundles);
        ValidationError when either is out of range."""
        if size is None:
            if wait is not None:
                raise ValidationError(
                    "bundle_wait needs a bundle_size.", code="invalid_bundle_size"
                )
            return None
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= cls.MAX_SIZE:
            raise ValidationError(
                f"bundle_size must be an integer 1..{cls.MAX_SIZE}, not {size!r}.",
                code="invalid_bundle_size",
            )
        if wait is None or wait == 0 or wait == timedelta(0):
            return cls(size, timedelta(0))
        try:
            waited = validate_timeout(wait)
        except ValidationError:
            raise ValidationError(
                f"bundle_wait must be a duration of 0 or more, not {wait!r}.",
                code="invalid_bundle_wait",
            ) from None
        return cls(size, waited)


registry = HandlerRegistry()


def deliver_notification(ctx: TaskContext) -> Any:
    """The built-in handler of the queue `scylla.notify`: POST the outcome a delivery task
    names (`scylla_django.deliveries.deliver`). The app registers it in every process."""
    from ..deliveries import deliver

    return deliver(ctx.task)


def register_builtin(registry: HandlerRegistry = registry) -> None:
    """Register the handlers of the app's own queues (`scylla.notify`)."""
    registry.register(NOTIFY_QUEUE, deliver_notification)


def autodiscover() -> None:
    """Import `handlers.py` of every installed app, registering their handlers.

    The module names are the `HANDLER_MODULES` setting (default `["handlers"]`). The app's
    `ready()` calls this, so the registry is full in every process (a shell, the web server);
    calling it again imports nothing new.

    The queues of a `django.tasks` ScyllaBackend are registered by `scylla_worker`, which calls
    `scylla_django.backends.register_handlers()` too: the registry knows nothing of the adapter.
    """
    autodiscover_modules(*scylla_settings.HANDLER_MODULES)


def qualname(func: Handler) -> str:
    """The dotted name of `func` (module and qualified name), as error messages show it."""
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
