"""The service that releases (or cancels) the callbacks of batches that are due
(`batches.release_callbacks()`)."""

from __future__ import annotations

from .. import batches
from .service import Service


class BatchCallbacks(Service):
    """Releases the batch callbacks whose condition holds and cancels those whose condition
    can no longer hold. Counts `callbacks_released` and `callbacks_cancelled`."""

    name = "callbacks"

    def work(self, using: str) -> dict[str, int]:
        done = batches.release_callbacks(using)
        return {"callbacks_released": done.released, "callbacks_cancelled": done.cancelled}
