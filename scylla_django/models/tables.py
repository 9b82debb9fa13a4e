"""The models the PostgreSQL lease and finish statements name, as one `db.Tables` value."""

from __future__ import annotations

from django.apps import apps
from django.db import models

from .. import db
from .batches import Batch
from .history import History
from .processes import Worker
from .queues import QueueSetting

#: The `db.Tables` of each Task model, made once (the statements built from one are cached by it).
_TABLES: dict[type[models.Model], db.Tables] = {}


def tables(task: type[models.Model]) -> db.Tables:
    """The `db.Tables` of the statements that lease and finish tasks of `task` (the Task
    model): its History, Worker, QueueSetting and Batch beside it."""
    found = _TABLES.get(task)
    if found is None:
        found = _TABLES[task] = db.Tables(
            task=task, history=History, worker=Worker, queue_setting=QueueSetting, batch=Batch
        )
    return found


def queue_tables() -> list[str]:
    """The names of this app's tables (tasks, History, workers, keys, ...), whose dead rows and
    bloat the health surfaces report (`db.vacuum_report`)."""
    config = apps.get_app_config("scylla_django")
    return sorted(
        model._meta.db_table
        for model in config.get_models()
        if model._meta.managed and not model._meta.proxy
    )
