"""The service that ages waiting tasks: the priority of a ready task of a queue with `aging`
rises by one for each `aging` it waits (`queues.age_ready`), so a low priority is never
starved by a stream of higher ones."""

from __future__ import annotations

import logging

from ..models import Task
from ..models.queues import age_ready
from ..text import plural
from .service import Service

logger = logging.getLogger("scylla_django")


class PriorityAging(Service):
    """Raises the priority of the ready tasks that waited their queue's `aging` since they
    were submitted or last raised. Counts `aged`."""

    name = "priority aging"

    def work(self, using: str) -> dict[str, int]:
        aged = age_ready(Task.objects.using(using))
        if aged:
            logger.info("raised the priority of %s", plural(aged, "waiting task"))
        return {"aged": aged}
