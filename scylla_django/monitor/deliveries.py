"""The service that submits the deliveries of completion notifications
(`deliveries.submit_deliveries()`)."""

from __future__ import annotations

import logging

from .. import deliveries
from ..text import plural
from .service import Service

logger = logging.getLogger("scylla_django")


class Deliveries(Service):
    """Submits a delivery task for each final task that asked for a notification (`notify`)
    and has none yet, `deliveries.DELIVERY_BATCH` per transaction until none is left.
    Counts `notifications`."""

    name = "notification deliveries"

    def work(self, using: str) -> dict[str, int]:
        total = 0
        while done := deliveries.submit_deliveries(using):
            total += done
            if done < deliveries.DELIVERY_BATCH:
                break
        if total:
            logger.info("submitted %s", plural(total, "notification delivery"))
        return {"notifications": total}
