"""The models the PostgreSQL lease and finish statements name, as one `db.Tables` value."""

from __future__ import annotations

import functools

from django.apps import apps
from django.db import models

from .. import db
from .batches import Batch
from .history import History
from .processes import Worker
from .queues import QueueSetting


@functools.cache
def tables(task: type[models.Model]) -> db.Tables:
    """The `db.Tables` of the statements that lease and finish tasks of `task` (the Task
    model): its History, Worker, QueueSetting and Batch beside it. One value per model, made
    once: the statements built from it are cached by it."""
    return db.Tables(
        task=task, history=History, worker=Worker, queue_setting=QueueSetting, batch=Batch
    )


def queue_tables() -> list[str]:
    """The names of this app's tables (tasks, History, workers, keys, ...), whose dead rows and
    bloat the health surfaces report (`db.vacuum_report`)."""
    config = apps.get_app_config("scylla_django")
    return sorted(
        model._meta.db_table
        for model in config.get_models()
        if model._meta.managed and not model._meta.proxy
    )
