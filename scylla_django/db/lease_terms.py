"""What a worker asks for when it leases: the one argument of a driver's `lease` and
`finish_and_lease`, validated by the models (`TaskQuerySet.lease`) before it reaches a driver."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class LeaseTerms:
    """A lease of up to `limit` ready tasks of `queues` for the worker called `worker`
    (its pk `worker_id`), each for `lease_length`.

    `timeouts` are the run-time limits of the queues' tasks that set none of their own (a
    queue missing: no limit); a leased task with a limit is never held past it plus
    `timeout_grace`. With a `reservation`, a task's first deadline is that much later instead
    of `lease_length`, until its handler starts (see `docs/howto/crashes.md`).
    """

    worker_id: int
    worker: str
    queues: Sequence[str]
    limit: int
    lease_length: timedelta
    timeouts: Mapping[str, timedelta]
    timeout_grace: timedelta
    reservation: timedelta | None = None
