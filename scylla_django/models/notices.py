"""The signals of `scylla_django.signals`, sent for a task once the write that concerns it has
committed."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import models, transaction
from django.dispatch import Signal

from .. import signals

logger = logging.getLogger("scylla_django")


def send_on_commit(signal: Signal, using: str, *, task: models.Model, **kwargs: Any) -> None:
    """Send `signal` for `task` once the current transaction commits (at once outside a
    transaction), with the Task model as the sender.

    Nothing is scheduled when no receiver is connected: bulk submissions call this once per
    task. A receiver that raises is logged with its traceback and stops neither the other
    signals nor the caller: the write it follows has committed, so its error is never the
    transition's (a worker that finishes a task and leases the next in one statement still
    gets the tasks it leased).
    """
    send_each_on_commit(signal, using, type(task), [(task, kwargs)])


def send_each_on_commit(
    signal: Signal,
    using: str,
    model: type[models.Model],
    sends: Sequence[tuple[models.Model, dict[str, Any]]],
) -> None:
    """`send_on_commit` for each of `sends` (a task of `model` and the other keyword arguments
    of its send), in their order, from one callback: a worker's lease and its batched finish
    send one per task, and a callback each cost as much as the send itself.

    A receiver that raises for one task stops neither the other receivers nor the other
    tasks' sends, as with `send_on_commit`.
    """
    sender = model._meta.concrete_model
    if sends and signal.has_listeners(sender):
        transaction.on_commit(partial(_send_each, signal, sender, sends), using=using)


def _send_each(
    signal: Signal,
    sender: type[models.Model] | None,
    sends: Sequence[tuple[models.Model, dict[str, Any]]],
) -> None:
    for task, kwargs in sends:
        _send(signal, sender, task, kwargs)


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
