"""The registry of task handlers: one function per queue, found in each app's `handlers.py`.

```python
# myapp/handlers.py
from scylla_django import handler

@handler("reports")
def build_report(ctx):
    ...
```
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.utils.module_loading import autodiscover_modules

from . import retries, unique_keys
from .conf import scylla_settings
from .exceptions import ScyllaError
from .validation import validate_progress, validate_queue

if TYPE_CHECKING:
    from .models import Task, Worker

Handler = Callable[["TaskContext"], Any]
H = TypeVar("H", bound=Handler)


class TaskContext:
    """What a handler gets: the task, its spec, the worker, progress and a stop check."""

    def __init__(self, task: Task, worker: Worker) -> None:
        self.task = task
        self.worker = worker
        self._progress = task.progress
        self._stop: ScyllaError | None = None
        self._lock = threading.Lock()
        # Kept by the worker: heartbeats failed in a row, progress the database has, whether
        # the lease was given back, whether the handler is still running.
        self.failed_heartbeats = 0
        self.sent_progress = task.progress
        self.yielded = False
        self.handler_running = False

    @property
    def spec(self) -> Any:
        return self.task.spec

    @property
    def progress(self) -> float:
        return self._progress

    def set_progress(self, progress: float) -> None:
        """Record progress (0..1); it is sent with the next heartbeat."""
        self._progress = validate_progress(progress)

    def check(self) -> None:
        """Raise if the handler should stop: TaskCancelled, LeaseLost or WorkerStopping.

        Call it between steps of long work. The worker writes nothing more for a stopped task.
        """
        with self._lock:
            if self._stop is not None:
                raise self._stop

    @property
    def stopped(self) -> bool:
        return self._stop is not None

    def stop(self, reason: ScyllaError) -> None:
        with self._lock:
            if self._stop is None:
                self._stop = reason

    def __repr__(self) -> str:
        return f"<TaskContext {self.task.rn} on {self.worker.name}>"


class HandlerAlreadyRegistered(Exception):
    """Two different functions were registered for one queue."""


class HandlerRegistry:
    """Maps queue names to the function that runs their tasks."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

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

    def serves(self, queue: str) -> bool:
        """Whether a handler is registered for `queue`."""
        return queue in self._handlers

    def queues(self) -> list[str]:
        return sorted(self._handlers)


registry = HandlerRegistry()


def handler(
    *queues: str,
    registry: HandlerRegistry = registry,
    retry: retries.Retry | None = None,
    unique_key: Callable[[Any], str] | None = None,
) -> Callable[[H], H]:
    """Register the decorated function as the handler of `queues`.

    The function gets a `TaskContext`; its return value (JSON) becomes the task's result.
    `retry` is the queues' retry policy for tasks that have none of their own: an abort it
    covers is followed by a new task (see `scylla_django.retries`). `unique_key(spec)` is the
    unique key of a task submitted to the queues without one, in every process that imports
    the handler (README, "Unique tasks").
    """
    if unique_key is not None and not callable(unique_key):
        raise TypeError(f"unique_key must be a function of the spec, not {unique_key!r}")
    if retry is not None and not isinstance(retry, retries.Retry):
        raise TypeError(f"retry must be a Retry(...), not {retry!r}")
    if not queues:
        raise TypeError("@handler needs at least one queue name: @handler('reports')")

    def decorate(func: H) -> H:
        for queue in queues:
            registry.register(queue, func)
            retries.register_policy(queue, retry)
            unique_keys.register_key(queue, unique_key)
        return func

    return decorate


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
