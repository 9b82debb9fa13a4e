"""A worker's set operations on the leases it holds: heartbeat, check, yield and finish many
of them at once. Each row is fenced on its lease (running, owned by the worker, the same lease
number) as the one-task transitions of `Task` are (docs/discussions/correctness.md); a lease
missing from a result was not written, and `refusals()` says why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from django.db import connections, models
from django.db.models import BooleanField, Case, DateTimeField, F, FloatField, Q, Value, When
from django.db.models.functions import Coalesce, Least

from .. import db
from ..conf import scylla_settings
from ..db import Now
from ..enums import Operation, sources
from ..exceptions import ScyllaError
from ..validation import validate_progress, validate_timeout
from . import finishing
from .outcomes import Outcome
from .processes import Worker, worker_name
from .refusals import refusal_errors
from .steps import CURSOR, Step, cursor_row, write_cursor
from .tables import tables

# A yield is the only write that sets a task's deadline before its own `updated` time (but
# for a heartbeat capped at a limit already past, whose lease is over anyway), so a running
# task with `deadline >= updated` has not been given back. A heartbeat is fenced on this row
# condition rather than on History: PostgreSQL re-checks a row condition against the version a
# concurrent yield committed, so even a heartbeat already waiting for the row cannot undo a yield.
NOT_YIELDED = Q(deadline__gte=F("updated"))


def capped_deadline(extended: Any) -> Any:
    """The deadline a heartbeat writes: `extended` (a datetime expression), or the row's
    `timeout_at` if that is earlier: the run-time limit its lease was given (null: none), past
    which no heartbeat takes the lease. A lease that expires there ran into its limit: the
    monitor aborts its task with `timeout` (`reset_expired`), never makes it ready again."""
    return Least(extended, Coalesce(F("timeout_at"), extended), output_field=DateTimeField())


#: Leases per heartbeat statement where it names each lease (not PostgreSQL, whose one
#: statement takes arrays): a pair of parameters each, well under every vendor's limit.
HEARTBEAT_CHUNK = 500

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
        extended only, in the same statement on PostgreSQL, elsewhere in a fenced transaction
        of their own right after (`save_cursors`).
        """
        name = worker_name(worker)
        lease_length = validate_timeout(
            scylla_settings.LEASE_LENGTH if lease_length is None else lease_length
        )
        reserved = None if reservation is None else validate_timeout(reservation)
        if not leases:
            return set()
        begun = set(started)
        if db.uses_single_statement_transitions(connections[self.db]):
            rows = [
                (pk, lease, None if value is None else validate_progress(value), pk in begun)
                for pk, (lease, value) in leases.items()
            ]
            held = None
            if cursors:
                held = db.Cursors(
                    Step._meta.db_table,
                    CURSOR,
                    [cursor_row(pk, value) for pk, value in cursors.items() if pk in leases],
                )
            return db.postgresql_heartbeat(
                tables(self.model), self.db, name, rows, lease_length, reserved, held
            )
        extended: set[int] = set()
        chunk = list(leases.items())
        for start in range(0, len(chunk), HEARTBEAT_CHUNK):
            part = dict(chunk[start : start + HEARTBEAT_CHUNK])
            begun_here = begun & part.keys()
            extended |= self._heartbeat_chunk(name, part, lease_length, begun_here, reserved)
        if cursors:
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

    def _heartbeat_chunk(
        self,
        name: str,
        leases: Mapping[int, tuple[int, float | None]],
        lease_length: timedelta,
        started: set[int],
        reservation: timedelta | None,
    ) -> set[int]:
        """`heartbeat_many` for up to `HEARTBEAT_CHUNK` leases, through the ORM (not
        PostgreSQL): a statement with a pair of parameters per lease."""
        held = Q()
        for pk, (lease, _) in leases.items():
            held |= Q(pk=pk, leases=lease)
        fenced = (
            self.model._default_manager.using(self.db)
            .filter(held, status__in=sources(Operation.HEARTBEAT), owner=name)
            .filter(NOT_YIELDED)
        )
        full = capped_deadline(db.now_plus(lease_length))
        values: dict[str, Any] = {"deadline": full, "updated": Now()}
        if reservation is not None:
            # A lease whose handler has not started (nor is told now to have) stays a
            # reservation.
            begun = Q(handler_started=True) | Q(pk__in=sorted(started))
            values["deadline"] = Case(
                When(begun, then=full),
                default=capped_deadline(db.now_plus(reservation)),
                output_field=DateTimeField(),
            )
        if started:
            values["handler_started"] = Case(
                When(pk__in=sorted(started), then=Value(True)),
                default=F("handler_started"),
                output_field=BooleanField(),
            )
        progress = [
            When(pk=pk, then=Value(validate_progress(value)))
            for pk, (_, value) in leases.items()
            if value is not None
        ]
        if progress:
            values["progress"] = Case(*progress, default=F("progress"), output_field=FloatField())
        return db.update_returning_pks(fenced, values)

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

        On PostgreSQL one statement for them all; elsewhere one transition per task.
        """
        name = worker_name(worker)
        if not leases:
            return set()
        if db.uses_single_statement_transitions(connections[self.db]):
            return db.postgresql_yield(tables(self.model), self.db, name, list(leases.items()))
        yielded: set[int] = set()
        held: list[Any] = list(
            self.model._default_manager.using(self.db).filter(pk__in=list(leases))
        )
        for task in held:  # each a Task, whose transition yields it
            try:
                task.yield_lease(name, lease=leases[task.pk])
            except ScyllaError:
                continue
            yielded.add(task.pk)
        return yielded

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
