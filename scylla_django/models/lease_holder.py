"""What the holder of a task's lease may do with the task besides its heartbeat and its finish
(`Task.heartbeat`, `complete`, `abort`): lock the lease for a transaction, give it back (a yield,
a lapse), give the task back to wait (a snooze, a park), record a step, a cursor or a durable
wait. `Task` inherits them from `LeaseHolderOperations`.

Each is fenced on the lease, as every worker operation is (docs/discussions/correctness.md):
the task running, owned by the worker, under the same lease number (the `lease` given, else the
task's `leases` as it was leased); a write that matches no row raises the refusal that says why
(LeaseLost, TaskCancelled), and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol

from django.db.models import F, Q

from .. import db
from ..conf import scylla_settings
from ..db import Clock, capped_deadline
from ..enums import TRANSITIONS, Operation, Status, sources
from ..exceptions import LeaseLost, StepAlreadyRecorded, error_record
from ..validation import validate_delay
from . import steps, waits
from .processes import Worker, worker_name
from .steps import LeasedTask, Step
from .waits import Wait, WaitFor


class HeldTask(LeasedTask, Protocol):
    """What these operations need of a task (`Task` is one; this module stands below
    `task.py` and names no model above it): what the durable records need (`LeasedTask`), its
    lease number, its manager, and the conditional write of a transition with its refusal."""

    leases: int
    _default_manager: Any

    def _apply(
        self,
        operation: Operation,
        worker: Worker | str | None,
        values: dict[str, Any],
        refresh: Sequence[str] = ...,
        fence: Q | None = None,
        notify: tuple[str, str] | None = None,
        lease: int | None = None,
        logged_worker: str | None = None,
    ) -> None: ...

    def _refusal(
        self, operation: Operation, worker: str | None, lease: int, using: str
    ) -> Exception: ...

    def abort(
        self,
        worker: Worker | str,
        errors: Any,
        *,
        retry: bool | None = None,
        lease: int | None = None,
    ) -> Any: ...


class LeaseHolderOperations:
    """The operations of the holder of a task's lease, other than its heartbeat and finish
    (the base of `Task`)."""

    def lock_lease(self: HeldTask, worker: Worker | str, *, lease: int | None = None) -> None:
        """Inside a transaction: lock this task's row while `worker` holds its lease (running,
        owned by `worker`, lease number `lease`, else this object's `leases`), until the
        transaction ends. A reset, a takeover or a cancel of the task waits for that commit,
        so what the transaction writes commits only while the lease is held.

        Raises LeaseLost (the lease was reset or taken over) or TaskCancelled, the transaction
        to be rolled back (see `TaskContext.fenced()`).
        """
        name = worker_name(worker)
        held = self.leases if lease is None else lease
        using = self._state.db or "default"
        fenced = (
            type(self)
            ._default_manager.using(using)
            .filter(pk=self.pk, status__in=sources(Operation.COMPLETE), owner=name, leases=held)
        )
        if not db.lock_rows(fenced):
            raise self._refusal(Operation.COMPLETE, name, held, using)

    def yield_lease(self: HeldTask, worker: Worker | str, *, lease: int | None = None) -> None:
        """Give the task back: `deadline = now - 1 s` and a TaskYield{worker, progress} row.

        The task stays running until the monitor's next pass makes it ready, without writing a
        TaskTimeout. Used by a worker shutting down gracefully. A lease that already ran into
        its run-time limit keeps its deadline there (`timeout_at`): the monitor aborts the
        task with `timeout` instead.
        """
        self._apply(
            Operation.YIELD,
            worker,
            {"deadline": capped_deadline(db.now_plus(timedelta(seconds=-1), Clock))},
            notify=(db.READY_CHANNEL, "queue"),
            lease=lease,
        )

    def lapse_lease(self: HeldTask, worker: Worker | str, *, lease: int | None = None) -> None:
        """End the lease as a lost one: `deadline = now - 1 s`, nothing else written.

        For a worker whose run of the task failed with no outcome from the handler (the child
        process running it under `--isolation process` died): the monitor's next pass then
        treats the lease exactly as the lease of a worker that died, at once instead of when
        the lease would have run out: back to ready with a TaskTimeout{worker, progress} row,
        counted toward `MAX_LEASES` (aborted `max_leases_exceeded` at the cap). Unlike
        `yield_lease()`, no TaskYield row is written, so the lease counts. A lease that
        already ran into its run-time limit keeps its deadline there (the monitor aborts the
        task with `timeout`). The lease is marked started (`handler_started`): a child process
        runs this task alone, so its death is this task's, and counts even when it came before
        the heartbeat reported the start (a reservation's expiry would not count).

        Raises LeaseLost or TaskCancelled when `worker` does not hold the lease.
        """
        self._apply(
            Operation.LAPSE,
            worker,
            {
                "deadline": capped_deadline(db.now_plus(timedelta(seconds=-1), Clock)),
                "handler_started": True,
            },
            lease=lease,
        )

    def snooze(
        self: HeldTask,
        worker: Worker | str,
        delay: timedelta | float | str,
        *,
        lease: int | None = None,
    ) -> bool:
        """running → ready with `not_before = now + delay` (database clock); True if snoozed.

        The lease ends (owner, deadline cleared, progress 0; keys freed as by any transition
        out of running) and `snoozes` goes up by one, in one write fenced on the lease, with a
        History `TaskSnooze{worker}` row. No attempt is spent, and the lease does not count
        toward `MAX_LEASES`. A task that has snoozed `SCYLLA["MAX_SNOOZES"]` times is aborted
        instead with the error `too_many_snoozes` (never retried), and False is returned.

        Raises ValidationError (`invalid_delay`) for a delay that is not a positive duration,
        LeaseLost or TaskCancelled when `worker` does not hold the lease.
        """
        length = validate_delay(delay)
        name = worker_name(worker)
        held = self.leases if lease is None else lease
        cap = scylla_settings.MAX_SNOOZES
        values = {
            "status": TRANSITIONS[Operation.SNOOZE].target,
            "owner": None,
            "deadline": None,
            "progress": 0.0,
            "not_before": db.now_plus(length, Clock),
            "snoozes": F("snoozes") + 1,
        }
        try:
            self._apply(
                Operation.SNOOZE,
                name,
                values,
                refresh=["status", "progress", "deadline", "owner", "not_before", "snoozes"],
                fence=Q(snoozes__lt=cap),
                lease=held,
                logged_worker=name,
            )
            return True
        except LeaseLost:
            using = self._state.db or "default"
            still_held = (
                type(self)
                ._default_manager.using(using)
                .filter(
                    pk=self.pk, status=Status.RUNNING, owner=name, leases=held, snoozes__gte=cap
                )
            )
            if not still_held.exists():
                raise
        error = error_record(
            "too_many_snoozes",
            f"The task snoozed {cap} times (SCYLLA['MAX_SNOOZES']).",
            {"max_snoozes": cap},
        )
        self.abort(name, [error], retry=False, lease=held)
        return False

    def park(self: HeldTask, worker: Worker | str, until: Any, *, lease: int | None = None) -> None:
        """running → ready with `not_before = until`: a durable sleep's or wait's give-back
        (`scylla_django.durable`), written in the transaction that records the wait.

        As a snooze (History `TaskSnooze{worker}`, `snoozes` up by one, no attempt spent, the
        lease not counted toward `MAX_LEASES`), but never refused by `MAX_SNOOZES`: a task may
        wait as often as its work needs. Raises LeaseLost or TaskCancelled when `worker` does
        not hold the lease.
        """
        name = worker_name(worker)
        values = {
            "status": TRANSITIONS[Operation.SNOOZE].target,
            "owner": None,
            "deadline": None,
            "progress": 0.0,
            "not_before": until,
            "snoozes": F("snoozes") + 1,
        }
        self._apply(
            Operation.SNOOZE,
            name,
            values,
            refresh=["status", "progress", "deadline", "owner", "not_before", "snoozes"],
            lease=lease,
            logged_worker=name,
        )

    def record_step(
        self: HeldTask,
        worker: Worker | str,
        name: str,
        result: Any = None,
        *,
        lease: int | None = None,
    ) -> Step:
        """Record the step `name` of this task with `result` (JSON), fenced on `worker`'s
        lease (an HTTP worker's step; a handler's is `ctx.step()`). StepAlreadyRecorded if
        the task has one of that name, ValidationError for a bad name or result, LeaseLost or
        TaskCancelled when the lease is not held; nothing is written when it raises."""
        held = self.leases if lease is None else lease
        using = self._state.db or "default"
        with db.write_atomic(using):
            self.lock_lease(worker, lease=held)
            if Step.objects.using(using).filter(task_id=self.pk, name=name).exists():
                raise StepAlreadyRecorded(
                    f"{self.rn} recorded the step {name!r} already.", rn=self.rn
                )
            return steps.record_step(self, held, name, result)

    def checkpoint(
        self: HeldTask, worker: Worker | str, cursor: Any, *, lease: int | None = None
    ) -> Step:
        """Write this task's cursor, fenced on `worker`'s lease (see `ctx.checkpoint()`)."""
        held = self.leases if lease is None else lease
        return steps.save_cursor(self, worker, held, cursor)

    def begin_wait(
        self: HeldTask, worker: Worker | str, wanted: WaitFor, *, lease: int | None = None
    ) -> Wait:
        """Begin the durable wait `wanted` (or take it up again), fenced on `worker`'s lease;
        an open wait parks the task (see `waits.begin_wait`)."""
        held = self.leases if lease is None else lease
        return waits.begin_wait(self, worker, held, wanted)
