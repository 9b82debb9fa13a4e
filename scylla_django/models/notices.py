"""The signals of `scylla_django.signals`, sent for a task once the write that concerns it has
committed."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import models, transaction
from django.dispatch import Signal

from .. import signals

logger = logging.getLogger("scylla_django")


def send_on_commit(signal: Signal, using: str, *, task: models.Model, **kwargs: Any) -> None:
    """Send `signal` for `task` once the current transaction commits (at once outside a
    transaction), with the Task model as the sender.

    Nothing is scheduled when no receiver is connected: leases and bulk submissions call this
    once per task. A receiver that raises is logged with its traceback and stops neither the
    other signals nor the caller: the write it follows has committed, so its error is never
    the transition's (a worker that finishes a task and leases the next in one statement
    still gets the tasks it leased).
    """
    sender = task._meta.concrete_model
    if signal.has_listeners(sender):
        transaction.on_commit(partial(_send, signal, sender, task, kwargs), using=using)


def _send(
    signal: Signal, sender: type[models.Model] | None, task: models.Model, kwargs: Any
) -> None:
    try:
        signal.send(sender=sender, task=task, **kwargs)
    except Exception:
        logger.exception(
            "a receiver of %s raised for task %s; what was written stands",
            _name(signal),
            getattr(task, "rn", task.pk),
        )


def _name(signal: Signal) -> str:
    """The name `scylla_django.signals` gives `signal`."""
    names = [name for name, value in vars(signals).items() if value is signal]
    return names[0] if names else "a signal"
