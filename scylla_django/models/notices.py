"""The signals of `scylla_django.signals`, sent for a task once the write that concerns it has
committed."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import models, transaction
from django.dispatch import Signal


def send_on_commit(signal: Signal, using: str, *, task: models.Model, **kwargs: Any) -> None:
    """Send `signal` for `task` once the current transaction commits (at once outside a
    transaction), with the Task model as the sender.

    Nothing is scheduled when no receiver is connected: leases and bulk submissions call this
    once per task. A receiver that raises is logged (Django's `django.db.backends` logger, with
    the traceback) and stops neither the other receivers nor the caller: the write it follows
    has committed, so its error is never the transition's (a worker that finishes a task and
    leases the next in one statement still gets the tasks it leased).
    """
    sender = task._meta.concrete_model
    if signal.has_listeners(sender):
        transaction.on_commit(
            partial(signal.send, sender=sender, task=task, **kwargs), using=using, robust=True
        )
