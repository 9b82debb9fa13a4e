"""The eager mode (`SCYLLA["EAGER"] = True`, for tests): each submitted task whose queue has a
handler in this process is run at once, when its submission commits, on the submitting thread
(`worker.foreground.run_task`, as `scylla_django.testing.run_task` runs it: through the
worker's own code), so the submitter finds it finished.

The receiver of `task_submitted` is connected only while the setting is on (at startup, and
when a test overrides `SCYLLA`): with it off, submissions pay nothing. A handler's error is its
task's outcome (aborted, and retried by its policy), never the submitter's.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from .conf import scylla_settings
from .handlers import registry
from .models import Task
from .signals import task_submitted
from .worker.foreground import run_task

logger = logging.getLogger("scylla_django")

_UID = "scylla_django.eager"


def run_submitted(sender: Any, task: Task, **kwargs: Any) -> None:
    """`task_submitted` receiver: run `task` here if its queue has a handler and it is due."""
    if registry.get(task.queue) is None:
        return
    using = task._state.db or "default"
    current = Task.objects.using(using).ready([task.queue]).filter(rn=task.rn).exists()
    if current:
        run_task(task.rn, using=using, heartbeat=False)


def sync(**kwargs: Any) -> None:
    """Connect the receiver if `SCYLLA["EAGER"]` is on, disconnect it otherwise."""
    setting = kwargs.get("setting")
    if setting is not None and setting != "SCYLLA":
        return
    try:
        eager = scylla_settings.EAGER
    except ImproperlyConfigured:  # reported by `manage.py check` (scylla_django.E001)
        eager = False
    if eager:
        task_submitted.connect(run_submitted, sender=Task, dispatch_uid=_UID)
    else:
        task_submitted.disconnect(sender=Task, dispatch_uid=_UID)


def connect() -> None:
    """Follow the setting from now on (the app's `ready()`)."""
    setting_changed.connect(sync, dispatch_uid=_UID)
    sync()
