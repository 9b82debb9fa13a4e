"""The service that releases follow-up tasks whose parents all completed, and cancels those
with a failed parent (`followups.release_followups()`)."""

from __future__ import annotations

import logging

from .. import followups
from ..text import plural
from .service import Service

logger = logging.getLogger("scylla_django")


class FollowUps(Service):
    """Releases (or cancels) the follow-ups that are due. Counts `released` and `cancelled`."""

    name = "follow-ups"

    def work(self, using: str) -> dict[str, int]:
        followed = followups.release_followups(using)
        if followed.released or followed.cancelled:
            logger.info(
                "released %s, cancelled %s",
                plural(followed.released, "follow-up task"),
                plural(followed.cancelled, "follow-up task"),
            )
        return {"released": followed.released, "cancelled": followed.cancelled}
