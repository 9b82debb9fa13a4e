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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.utils.module_loading import autodiscover_modules

from .validation import validate_queue

if TYPE_CHECKING:
    from .worker import TaskContext

Handler = Callable[["TaskContext"], Any]
H = TypeVar("H", bound=Handler)


class HandlerAlreadyRegistered(Exception):
    """Two different functions were registered for one queue."""


class HandlerRegistry:
    """Maps queue names to the function that runs their tasks."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, queue: str, func: Handler) -> None:
        queue = validate_queue(queue)
        existing = self._handlers.get(queue)
        if existing is not None and _qualname(existing) != _qualname(func):
            raise HandlerAlreadyRegistered(
                f"Queue {queue!r} already has the handler {_qualname(existing)}; "
                f"cannot register {_qualname(func)} too."
            )
        self._handlers[queue] = func

    def get(self, queue: str) -> Handler | None:
        return self._handlers.get(queue)

    def queues(self) -> list[str]:
        return sorted(self._handlers)

    def unregister(self, queue: str) -> None:
        self._handlers.pop(queue, None)


registry = HandlerRegistry()


def handler(*queues: str, registry: HandlerRegistry = registry) -> Callable[[H], H]:
    """Register the decorated function as the handler of `queues`.

    The function gets a `TaskContext`; its return value (JSON) becomes the task's result.
    """
    if not queues:
        raise TypeError("@handler needs at least one queue name: @handler('reports')")

    def decorate(func: H) -> H:
        for queue in queues:
            registry.register(queue, func)
        return func

    return decorate


def autodiscover() -> None:
    """Import `handlers.py` of every installed app, registering their handlers.

    The queues of a `django.tasks` ScyllaBackend (its QUEUES) get the Django-task handler.
    """
    from .backends import register_handlers

    autodiscover_modules("handlers")
    register_handlers()


def _qualname(func: Handler) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
