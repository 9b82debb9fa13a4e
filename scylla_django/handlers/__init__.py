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

from .context import TASK_LOGGER, SpawnedBatch, TaskContext, TaskLogger
from .decorator import HandlerDecorator, check_snooze_policy, handler
from .durable_context import DurableContext, apart, synchronous
from .handler_registry import (
    Bundling,
    Handler,
    HandlerAlreadyRegistered,
    HandlerRegistry,
    autodiscover,
    deliver_notification,
    qualname,
    register_builtin,
    registry,
)

__all__ = [
    "TASK_LOGGER",
    "Bundling",
    "DurableContext",
    "Handler",
    "HandlerAlreadyRegistered",
    "HandlerDecorator",
    "HandlerRegistry",
    "SpawnedBatch",
    "TaskContext",
    "TaskLogger",
    "apart",
    "autodiscover",
    "check_snooze_policy",
    "deliver_notification",
    "handler",
    "qualname",
    "register_builtin",
    "registry",
    "synchronous",
]
