"""A task leased by its rn, whatever its queue's settings and its `not_before` say: a run
by hand (`scylla_run`), one transaction on every database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import F

from ..enums import TRANSITIONS, Operation, event, sources
from .clock import read_clock
from .tables import Tables
from .transactions import write_atomic


def lease_rn(
    tables: Tables, using: str, worker_id: int, worker: str, rn: str, lease_length: timedelta
) -> Any | None:
    """Lease the ready task `rn` for the worker `worker` (pk `worker_id`), whatever its queue's
    settings and its `not_before` say: a task run by hand. None if it is not ready or the
    worker may not lease. One conditional UPDATE and its History row, in one transaction, on
    every database (the key triggers still refuse a task whose keys are not free)."""
    transition = TRANSITIONS[Operation.LEASE]
    tasks = tables.task._default_manager.using(using)
    with write_atomic(using):
        workers = tables.worker._default_manager.using(using)
        if not workers.filter(pk=worker_id, stopped__isnull=True).exists():
            return None
        now = read_clock(using)
        leased = tasks.filter(rn=rn, status__in=sources(Operation.LEASE)).update(
            status=transition.target,
            owner=worker,
            deadline=now + lease_length,
            # A debug run does not enforce the run-time limit (docs/howto/timeouts.md): no cap,
            # nor one left by an earlier lease.
            timeout_at=None,
            lease_length=lease_length,
            leases=F("leases") + 1,
            handler_started=True,  # run at once, on the caller's thread
            updated=now,
        )
        if not leased:
            return None
        task = tasks.get(rn=rn)
        tables.history._default_manager.using(using).create(
            task_id=task.pk, typ=event(Operation.LEASE), worker=worker, time=now
        )
        return task
