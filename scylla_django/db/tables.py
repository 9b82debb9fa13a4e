"""The models whose tables the PostgreSQL lease and finish statements name, as one value.

This room never imports the models (they stand on it): the models package builds `Tables`
once (`models.TABLES`) and passes it to the statements that join several tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


@dataclass(frozen=True)
class Tables:
    """The Task model and the models its lease and finish statements also read or write.

    Frozen and hashable: a statement is built once per `Tables` and database, then cached.
    """

    task: type[models.Model]
    """Task: the rows leased and finished."""
    history: type[models.Model]
    """History: the TaskAssignment, completion and abort rows written with them."""
    worker: type[models.Model]
    """Worker: a lessee must be registered and not stopped."""
    queue_setting: type[models.Model]
    """QueueSetting: paused queues and running-task limits."""
    batch: type[models.Model]
    """Batch: the counters a finish of a batch's task moves."""
