"""A worker's set operations on the leases it holds: heartbeat, check, yield and finish many
of them at once. Each row is fenced on its lease (running, owned by the worker, the same lease
number) as the one-task transitions of `Task` are (docs/discussions/correctness.md); a lease
missing from a result was not written, and `refusals()` says why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from django.db import models
from django.db.models import Q

from .. import db
from ..conf import scylla_settings
from ..db import NOT_YIELDED
from ..enums import Operation, sources
from ..exceptions import ScyllaError
from ..validation import validate_progress, validate_timeout
from . import finishing
from .outcomes import Outcome
from .processes import Worker, worker_name
from .refusals import refusal_errors
from .steps import CURSOR, Step, cursor_row, write_cursor
from .tables import tables

#: Leases per statement of `lost_leases`, a read by key (one parameter each).
LOOKUP_CHUNK = 5000

_T = TypeVar("_T", bound=models.Model)


class HeldLeaseQuerySet(models.QuerySet[_T]):
    """The set operations of a worker on the leases it holds (the task queryset's base)."""

    def heartbeat_many(
        self,
        worker: Worker | str,
        leases: Mapping[int, tuple[int, float | None]],
        *,
        lease_length: timedelta | float | None = None,
        started: Collection[int] = (),
        reservation: timedelta | float | None = None,
        cursors: Mapping[int, Any] | None = None,
    ) -> set[int]:
        """Extend several leases of `worker` in one statement; return the pks it extended.

        `leases` maps a task pk to `(lease, progress)`: a lease number is the task's `leases`
        when it was leased, so a late call from an earlier lease of the same task is refused, and a
        progress of None leaves the progress as it is. Each row is fenced as `Task.heartbeat()`
        fences it (running, owned by `worker`, not yielded). A pk missing from the result was
        cancelled, lost or finished: `refusals()` says which.

        `started` are the pks whose handlers have started: the heartbeat tells the database
        (`handler_started`), at no statement of its own. A lease whose handler has started
        (told now, or before) is extended by `lease_length`; one leased with a reservation
        whose handler has not, by `reservation` (`lease_length` if None): it stays a
        reservation (docs/howto/crashes.md).

        No deadline goes past the task's `timeout_at`, the run-time limit its lease was given
        (`capped_deadline`): a task past its limit loses its lease however long its worker
        heartbeats it.

        `cursors` (task pk → cursor, JSON validated by the caller) are the checkpoints the
        handlers made since the last heartbeat (`ctx.checkpoint()`): written for the leases
        extended only, in the same statement where the driver can (PostgreSQL), elsewhere in a
        fenced transaction of their own right after (`save_cursors`).
        """
        name = worker_name(worker)
        lease_length = validate_timeout(
            scylla_settings.LEASE_LENGTH if lease_length is None else lease_length
        )
        reserved = None if reservation is None else validate_timeout(reservation)
        if not leases:
            return set()
        begun = set(started)
        rows = [
            (pk, lease, None if value is None else validate_progress(value), pk in begun)
            for pk, (lease, value) in leases.items()
        ]
        driver = db.driver(self.db)
        riding = None
        if cursors and driver.writes_cursors_in_heartbeat:
            riding = db.Cursors(
                Step._meta.db_table,
                CURSOR,
                [cursor_row(pk, value) for pk, value in cursors.items() if pk in leases],
            )
        extended = driver.heartbeat(tables(self.model), name, rows, lease_length, reserved, riding)
        if cursors and riding is None:
            self.save_cursors(
                name, {pk: (leases[pk][0], cursors[pk]) for pk in extended if pk in cursors}
            )
        return extended

    def save_cursors(
        self, worker: Worker | str, cursors: Mapping[int, tuple[int, Any]]
    ) -> set[int]:
        """Write checkpoints of `worker`'s leases (task pk → (lease number, cursor)) in one
        transaction that first locks the rows still held by those leases (running, owned by
        `worker`, the same lease number): a lease lost or given back writes none. Return the
        pks written."""
        if not cursors:
            return set()
        name = worker_name(worker)
        held = Q()
        for pk, (lease, _) in cursors.items():
            held |= Q(pk=pk, leases=lease)
        fenced = self.model._default_manager.using(self.db).filter(
            held, status__in=sources(Operation.COMPLETE), owner=name
        )
        with db.write_atomic(self.db):
            locked = set(fenced.select_for_update().values_list("pk", flat=True))
            for pk in sorted(locked):
                lease, value = cursors[pk]
                write_cursor(self.db, pk, lease, value)
        return locked

    def lost_leases(self, worker: Worker | str, leases: Mapping[int, int]) -> set[int]:
        """The pks of `leases` (task pk → lease number) that `worker` no longer holds: read,
        not written (a task cancelled, reset, finished, yielded or taken over); `refusals()`
        says why. A few statements for tens of thousands of leases, by key."""
        name = worker_name(worker)
        chunk = list(leases.items())
        held: set[tuple[int, int]] = set()
        running = sources(Operation.HEARTBEAT)
        for start in range(0, len(chunk), LOOKUP_CHUNK):
            part = [pk for pk, _ in chunk[start : start + LOOKUP_CHUNK]]
            held.update(
                self.model._default_manager.using(self.db)
                .filter(pk__in=part, status__in=running, owner=name)
                .filter(NOT_YIELDED)
                .values_list("pk", "leases")
            )
        return {pk for pk, lease in chunk if (pk, lease) not in held}

    def yield_many(self, worker: Worker | str, leases: Mapping[int, int]) -> set[int]:
        """Give back several leases of `worker` (task pk → lease number), each as
        `Task.yield_lease()` gives one back; return the pks yielded. A pk missing from the
        result is no longer held by this lease: `refusals()` says why.

        One statement for them all where the driver can (PostgreSQL); else one transition per
        task.
        """
        name = worker_name(worker)
        if not leases:
            return set()
        return db.driver(self.db).yield_leases(tables(self.model), name, list(leases.items()))

    def finish_many(self, worker: Worker | str, outcomes: Sequence[Outcome]) -> set[int]:
        """Complete or abort several leases of `worker` at once; return the pks finished.

        An outcome with `errors` aborts its task (running → aborted), one without completes it
        (running → completed, progress 1.0, with its `result`). Each row is fenced on its lease
        (running, owned by `worker`, the same lease number) and gets its TaskCompletion/TaskAbort
        row in the same transaction (on PostgreSQL, in the same statement). A pk missing from the
        result was not written: `refusals()` says why.
        """
        return finishing.finish_many(self, worker_name(worker), outcomes)

    def finish_and_lease(
        self,
        worker: Worker | str,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        *,
        limit: int = 1,
        lease_length: timedelta | float | None = None,
        timeouts: Mapping[str, timedelta | float | str | None] | None = None,
        timeout_grace: timedelta | float | None = None,
        reservation: timedelta | float | None = None,
    ) -> tuple[set[int], list[_T]]:
        """`finish_many(worker, outcomes)`, then `lease(worker, queues, limit=…, lease_length=…,
        timeouts=…, timeout_grace=…, reservation=…)`; return the pks finished and the tasks
        leased.

        For a worker that ends its tasks and takes the next ones. On PostgreSQL, when no outcome
        aborts its task, both are one statement: one round trip and one commit, in which the
        finished tasks and the leased ones change status together. A worker that may not lease
        (unregistered, stopped) leases nothing here; `lease()` raises WorkerNotFound for it.
        """
        return finishing.finish_and_lease(
            self,
            worker,
            outcomes,
            queues,
            limit,
            lease_length,
            timeouts,
            timeout_grace,
            reservation,
        )

    def refusals(self, worker: Worker | str, leases: Mapping[int, int]) -> dict[int, ScyllaError]:
        """Why `worker` no longer holds these leases (task pk → lease number), one error per pk:
        see `refusals.refusal_errors`."""
        return refusal_errors(self, worker_name(worker), leases)
