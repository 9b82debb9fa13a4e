"""An operator's repairs of one task: the lease to reset (`POST /tasks/{rn}/reset/`)."""

from __future__ import annotations

from .base import StrictIntegerField, StrictSerializer, worker_field


class ResetLeaseSerializer(StrictSerializer):
    """The lease to reset, as the operator saw it: its owner and lease number."""

    owner = worker_field()
    lease = StrictIntegerField(min_value=1, max_value=2**31 - 1)
