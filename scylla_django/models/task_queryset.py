"""TaskQuerySet: the selections of tasks, and the set operations of the state machine (lease,
cancel, reset, purge, ...); `Task.objects` is its manager.

The set operations that take more than one statement live in rooms of their own, each named
after its concept, and the queryset methods here are their public face: `submission` (submit,
submit_many), `held` (a worker's set operations on the leases it holds: heartbeat_many,
yield_many, finish_many, finish_and_lease, the base of TaskQuerySet), `finishing` (what
finish_many and finish_and_lease write), `successors` (retries), `maintenance` (reset_expired,
purge). Every statement a vendor writes its own way is its driver's (`db.driver`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Unpack

from django.db import router, transaction
from django.db.models import Q

from .. import db, logs, signals
from ..conf import scylla_settings
from ..db import Now, due, unexpired
from ..enums import (
    TERMINAL_STATUSES,
    TRANSITIONS,
    Operation,
    Status,
    event,
    sources,
)
from ..exceptions import (
    InvalidTransition,
    TaskNotFound,
    TaskPaused,
    WorkerNotFound,
)
from ..validation import (
    validate_limit,
    validate_queue,
    validate_queues,
    validate_timeout,
    validate_timeouts,
)
from . import (
    maintenance,
    submission,
    task_pauses,
)
from .admission import Admission
from .batches import count_finished
from .dependencies import AFTER_PARENTS
from .held import HeldLeaseQuerySet
from .history import History
from .inputs import SubmitOutcome, TaskOptions, validate_terminal_statuses
from .notices import send_each_on_commit, send_on_commit
from .origins import Submitter, TaskOrigin
from .processes import Worker, required_worker_id, worker_name
from .queues import QueueSummary, queue_summaries, ready_summary
from .steps import Step
from .tables import tables
from .traces import forget_traces
from .waits import TaskSignal, Wait

if TYPE_CHECKING:
    from .task import Task


class TaskQuerySet(HeldLeaseQuerySet["Task"]):
    """Selections, and the set operations of the state machine (lease, reset, purge)."""

    def ready(self, queues: Sequence[str] | None = None) -> TaskQuerySet:
        """Ready tasks whose `not_before` has passed and whose `expires_at` has not come,
        optionally on `queues` (exact names)."""
        qs = self.filter(status=Status.READY).filter(due(), unexpired())
        return qs.filter(queue__in=list(queues)) if queues is not None else qs

    def queue_summaries(self) -> list[QueueSummary]:
        """Every queue of this queryset that has tasks, by name: see `QueueSummary`."""
        return queue_summaries(self)

    def expired(self) -> TaskQuerySet:
        """Running tasks whose lease deadline has passed (on the database clock)."""
        return self.filter(status=Status.RUNNING, deadline__lt=Now())

    def terminal(self) -> TaskQuerySet:
        """Completed, aborted and cancelled tasks."""
        return self.filter(status__in=sorted(TERMINAL_STATUSES))

    def in_chain(self, rn: str) -> TaskQuerySet:
        """The tasks of one retry chain: its first task (`rn`) and every retry of it."""
        return self.filter(Q(root=rn) | Q(rn=rn))

    def get_by_rn(self, rn: str) -> Task:
        """The task with this rn, or TaskNotFound."""
        try:
            return self.get(rn=rn)
        except self.model.DoesNotExist:
            raise TaskNotFound(f"No task has rn {rn!r}.", rn=rn) from None

    # -- submission -------------------------------------------------------------------------

    def submit(
        self,
        queue: str,
        spec: Any,
        *,
        after: Sequence[str] | None = None,
        on_conflict: str | None = None,
        admission_key: str | None = None,
        on_full: str | None = None,
        wait: float | None = None,
        submitter: Submitter | None = None,
        **options: Unpack[TaskOptions],
    ) -> Task:
        """Submit a new `ready` task. Raises ValidationError, or DuplicateTask if `rn` exists.

        Admission (`models.admission`): when the queue's `max_ready` cap, or the cap of
        `admission_key` (`SCYLLA["MAX_READY"]`), is reached, `on_full` (else the cap's own)
        says what happens: "reject" raises QueueFull, "shed_oldest" cancels the oldest ready
        task it counts (error code `shed`), "wait" tries again for up to `wait` seconds, then
        raises QueueFull. `submitter` (`Submitter.of(user)`) is recorded beside the task.

        `retry` is the task's retry policy (it overrides its handler's). With `after` (rns of
        existing tasks; TaskNotFound if one is unknown) the task is a follow-up: held until
        every one of them has completed, then leasable from `not_before`.

        `unique_key` (else the queue's default key, `@handler(unique_key=...)`): at most one
        ready or running task holds it, and with `unique_window` a finished one keeps it for
        that long after finishing. When it is held, `on_conflict` says what happens:
        "return" (the default) returns the holder, "raise" raises DuplicateKey, "replace"
        gives a still-ready holder this spec, priority and not_before and returns it. The
        returned task's `submit_outcome` says which ("inserted", "duplicate", "replaced").

        On PostgreSQL a task without `after` is one statement (one round trip in autocommit)
        that also detects the duplicate rn and notifies listening workers.
        """
        admitted = Admission.of(
            admission_key=admission_key, on_full=on_full, wait=wait, submitter=submitter
        )
        task: Task = submission.submit(
            self.routed(queue),
            queue,
            spec,
            after=after,
            on_conflict=on_conflict,
            admitted=admitted,
            **options,
        )
        return task

    def named_database(self) -> str | None:
        """The alias `using()` or `db_manager()` named, else None (the routers decide)."""
        # Django keeps it in `_db` and has no public name for it.
        named: str | None = getattr(self, "_db", None)
        return named

    def routed(self, queue: object) -> TaskQuerySet:
        """This queryset on the database that `queue` is written to: the one named by
        `using()`, else the routers' choice for the queue (`routers.QueueRouter`)."""
        if self.named_database() is not None:
            return self
        return self.using(router.db_for_write(self.model, queue=queue))

    def submit_many(
        self, items: Iterable[Mapping[str, Any]], *, submitter: Submitter | None = None
    ) -> list[SubmitOutcome]:
        """Submit several tasks at once; return one outcome per item, in order.

        An item may name an `admission_key` and an `on_full` ("reject" or "shed_oldest");
        an item that a cap on ready tasks refuses has the outcome `full` (see `submit`).
        `submitter` is recorded beside every task inserted.

        Each item is a mapping of `submit()`'s arguments (`queue`, `spec`, and optionally
        `priority`, `rn`, `not_before`). Invalid items and duplicate rns (in the database or
        earlier in the same batch) are reported and skipped; the others are inserted, all in
        one transaction. On PostgreSQL that is one round trip: one statement, or for more than
        `inserts.SUBMIT_CHUNK` tasks one pipeline of them, each chunk sent as soon as it is
        validated.
        """
        if self.named_database() is not None:
            return submission.submit_many(self, items, submitter=submitter)
        if not scylla_settings.QUEUE_DATABASES:
            return submission.submit_many(
                self.using(router.db_for_write(self.model)), items, submitter=submitter
            )
        # Queues routed to several databases: one submission (one transaction) per database.
        listed = list(items)
        by_database: dict[str, list[int]] = {}
        for index, item in enumerate(listed):
            queue = item.get("queue") if isinstance(item, Mapping) else None
            by_database.setdefault(self.routed(queue).db, []).append(index)
        outcomes: dict[int, SubmitOutcome] = {}
        for database, indexes in by_database.items():
            done = submission.submit_many(
                self.using(database), [listed[i] for i in indexes], submitter=submitter
            )
            for outcome in done:
                index = indexes[outcome.index]
                outcomes[index] = dataclasses.replace(outcome, index=index)
        return [outcomes[index] for index in range(len(listed))]

    # -- leasing ----------------------------------------------------------------------------

    def lease(
        self,
        worker: Worker | str,
        queues: Sequence[str],
        *,
        limit: int = 1,
        lease_length: timedelta | float | None = None,
        timeouts: Mapping[str, timedelta | float | str | None] | None = None,
        timeout_grace: timedelta | float | None = None,
        reservation: timedelta | float | None = None,
    ) -> list[Task]:
        """Lease up to `limit` ready tasks from `queues` for `worker`: ready → running.

        Highest priority first, then oldest `created`. Each leased task gets `owner`,
        `deadline = now + lease_length` (default `SCYLLA['LEASE_LENGTH']`), `leases + 1` and a
        TaskAssignment History row; the lease length is kept on the task (`lease_length`) for
        heartbeats given none. No task is ever leased twice: concurrent callers skip each
        other's rows (PostgreSQL) or are serialised (SQLite).

        A task with a run-time limit (its own `timeout`, else its queue's in `timeouts`:
        queue → limit, default `SCYLLA['TIMEOUTS']`; a worker passes its handlers' too) gets
        `timeout_at = now + limit + timeout_grace` (default `SCYLLA['TIMEOUT_GRACE']`), and
        its deadline is never later: no heartbeat extends the lease past it, and the monitor
        aborts a task whose lease expired there with `timeout` (docs/howto/timeouts.md).

        With a `reservation` (a worker's, which reports its handlers' starts with its
        heartbeats), each lease is first a reservation: `deadline = now + reservation` and
        `handler_started` false, until a heartbeat that reports the handler's start makes it
        a full lease (`heartbeat_many(started=...)`). A reservation that expires (its worker
        crashed with the task prefetched, or running another task) makes the task ready
        again without counting toward `MAX_LEASES` (docs/howto/crashes.md).

        Only a registered worker that has not stopped may lease (checked in the same statement
        on PostgreSQL, the same transaction elsewhere); otherwise WorkerNotFound is raised.
        """
        name = worker_name(worker)
        pk = required_worker_id(name)
        queues = validate_queues(queues)
        limit = validate_limit(limit)
        lease_length = validate_timeout(
            scylla_settings.LEASE_LENGTH if lease_length is None else lease_length
        )
        limits = validate_timeouts(timeouts)
        grace = validate_timeout(
            scylla_settings.TIMEOUT_GRACE if timeout_grace is None else timeout_grace
        )
        reserved = None if reservation is None else validate_timeout(reservation)
        terms = db.LeaseTerms(pk, name, queues, limit, lease_length, limits, grace, reserved)
        leased = db.driver(self.db).lease(tables(self.model), terms)
        if leased is None:
            raise WorkerNotFound(f"No registered, running worker is called {name!r}.")
        send_each_on_commit(signals.task_leased, self.db, self.model, [(t, {}) for t in leased])
        return leased

    def lease_rn(
        self, worker: Worker | str, rn: str, *, lease_length: timedelta | float | None = None
    ) -> Task:
        """Lease the task `rn` for `worker`, by hand (`manage.py scylla_run`): ready → running
        as `lease()` does it, but whatever its queue's pause or limit and its `not_before`.

        Raises TaskNotFound, InvalidTransition if it is not ready or still waits for its
        parents (a follow-up), WorkerNotFound if `worker` may not lease.
        """
        name = worker_name(worker)
        pk = required_worker_id(name)
        length = validate_timeout(
            scylla_settings.LEASE_LENGTH if lease_length is None else lease_length
        )
        current = self.get_by_rn(rn)
        if current.status != Status.READY:
            raise InvalidTransition(
                f"Task {rn} is {current.status}, not ready.", rn=rn, status=current.status
            )
        if current.not_before == AFTER_PARENTS:
            raise InvalidTransition(
                f"Task {rn} waits for its parents to complete.", rn=rn, status=current.status
            )
        if task_pauses.is_paused(current):
            raise TaskPaused(f"Task {rn} is paused: resume it first.", rn=rn, status=current.status)
        task: Task | None = db.driver(self.db).lease_rn(tables(self.model), pk, name, rn, length)
        if task is None:
            if not Worker.objects.using(self.db).filter(pk=pk, stopped__isnull=True).exists():
                raise WorkerNotFound(f"No registered, running worker is called {name!r}.")
            status = self.get_by_rn(rn).status
            raise InvalidTransition(
                f"Task {rn} could not be leased (it is {status}; its keys may be held).",
                rn=rn,
                status=status,
            )
        send_on_commit(signals.task_leased, self.db, task=task)
        return task

    # -- clients ----------------------------------------------------------------------------

    def cancel(self) -> int:
        """Cancel every ready or running task of this queryset; return how many were cancelled.

        Tasks in other statuses are skipped (the count tells how many). Each cancelled task gets
        a TaskCancellation row, as with `Task.cancel()`; the rows are locked first, so a
        concurrent completion either commits before (the task is skipped) or fails after.
        """
        manager = self.model.objects.using(self.db)
        transition = TRANSITIONS[Operation.CANCEL]
        active = sources(Operation.CANCEL)
        with db.write_atomic(self.db):
            rows = list(
                self.filter(status__in=active)
                .select_for_update()
                .order_by("pk")
                .values("pk", "owner", "progress", "status", "batch_id")
            )
            if not rows:
                return 0
            ids = [row["pk"] for row in rows]
            now = db.read_clock(self.db)
            cancelled = manager.filter(pk__in=ids, status__in=active).update(
                status=transition.target, deadline=None, updated=now
            )
            History.objects.using(self.db).bulk_create(
                History.of(row, event(Operation.CANCEL), now) for row in rows
            )
            count_finished(
                self.db, [{"batch_id": row["batch_id"], "status": Status.CANCELLED} for row in rows]
            )
            db.driver(self.db).notify(
                db.STOP_CHANNEL,
                [r["owner"] for r in rows if r["status"] == Status.RUNNING and r["owner"]],
            )
        if signals.task_finished.has_listeners(self.model):
            for task in manager.filter(pk__in=ids):
                send_on_commit(signals.task_finished, self.db, task=task, status=task.status)
        return cancelled

    # -- monitor ----------------------------------------------------------------------------

    def reset_expired(self, *, chunk_size: int | None = None) -> int:
        """Deal with every expired lease; return how many tasks were reset or aborted.

        An expired running task becomes ready (owner and deadline cleared, progress 0) with a
        TaskTimeout{worker, progress} row, unless its last History row is a TaskYield, in which
        case no TaskTimeout is written. A timed-out task that has had `SCYLLA['MAX_LEASES']`
        assignments is aborted with the error `max_leases_exceeded` instead. Any number of
        monitors may run this at once: each expiry is handled exactly once.
        """
        return maintenance.reset_expired(self, chunk_size)

    def expire(self, *, chunk_size: int | None = None) -> int:
        """Cancel every ready task past its `expires_at` (database clock), with the error
        `expired` and a TaskCancellation row; return how many. Any number of monitors may run
        this at once: each task is cancelled once. A ready task past its expiry is never
        leased meanwhile (the lease statement checks it)."""
        return maintenance.expire(self, chunk_size)

    def purgeable(
        self,
        older_than: timedelta | None = None,
        statuses: Iterable[str] | None = None,
        queue: str | None = None,
        *,
        dead: bool = False,
    ) -> TaskQuerySet:
        """Terminal tasks not updated for `older_than` (default `SCYLLA['RETENTION']`). Dead
        letters are kept until an operator requeues or discards them, unless `dead` (an
        operator deleting the tasks chosen)."""
        age = validate_timeout(scylla_settings.RETENTION if older_than is None else older_than)
        chosen = validate_terminal_statuses(statuses)
        qs = self.filter(status__in=chosen, updated__lt=db.now_plus(-age))
        if not dead:
            qs = qs.filter(dead__isnull=True)
        return qs.filter(queue=validate_queue(queue)) if queue is not None else qs

    def purge(
        self,
        older_than: timedelta | None = None,
        statuses: Iterable[str] | None = None,
        queue: str | None = None,
        *,
        dead: bool = False,
        chunk_size: int | None = None,
        on_chunk: Callable[[int], object] | None = None,
    ) -> int:
        """Delete purgeable tasks (and their History) in batches; return how many were deleted.

        Each chunk is its own transaction of at most `chunk_size` (default
        `SCYLLA['PURGE_CHUNK_SIZE']`) tasks, and no row is loaded into Python. Only terminal
        tasks are ever deleted: `statuses` must be a subset of completed/aborted/cancelled.
        `on_chunk(n)` is called after each committed chunk with the number it deleted. Dead
        letters are kept, unless `dead` (see `purgeable`).
        """
        return maintenance.purge(
            self.purgeable(older_than, statuses, queue, dead=dead),
            chunk_size=chunk_size,
            on_chunk=on_chunk,
        )

    def delete(self) -> tuple[int, dict[str, int]]:
        """Delete these tasks and their History; the count covers tasks only.

        History's foreign key is DO_NOTHING so that Django can delete tasks with one DELETE
        instead of loading them; the History rows go first, in the same transaction.
        """
        with transaction.atomic(using=self.db):
            kept = [
                name
                for name in self.filter(log__isnull=False).order_by().values_list("log", flat=True)
                if name
            ]
            History.objects.using(self.db).filter(task__in=self.order_by().values("pk")).delete()
            forget_traces(self.db, self)
            task_pauses.TaskPause.objects.using(self.db).filter(
                task__in=self.order_by().values("pk")
            ).delete()
            TaskOrigin.objects.using(self.db).filter(task__in=self.order_by().values("pk")).delete()
            for side in (Step, Wait, TaskSignal):
                side.objects.using(self.db).filter(task__in=self.order_by().values("pk")).delete()
            _, per_model = super().delete()
            if kept:
                transaction.on_commit(lambda: logs.delete_logs(kept), using=self.db)
        count = per_model.get(self.model._meta.label, 0)
        return count, {self.model._meta.label: count}

    delete.alters_data = True  # type: ignore[attr-defined]
    delete.queryset_only = True  # type: ignore[attr-defined]

    def ready_summary(self) -> dict[str, tuple[int, timedelta | None]]:
        """Per queue with ready tasks: how many, and how long the oldest leasable one has
        waited (see `queues.ready_summary`)."""
        return ready_summary(self)

    def dead(self) -> TaskQuerySet:
        """Dead letters: aborted tasks given up (no retry policy, or its retries used up)."""
        return self.filter(dead__isnull=False, status=Status.ABORTED)

    def discard(self) -> int:
        """Let these dead letters go: they are ordinary aborted tasks again, purged after
        `RETENTION` (from now: `updated` is set). Returns how many were discarded."""
        discarded: int = self.dead().update(dead=None, updated=Now())
        return discarded

    def with_error_code(self, code: str) -> TaskQuerySet:
        """Tasks that recorded an error with this `code` (in any entry of `errors`)."""
        return self.filter(db.json_list_contains(self.model, "errors", {"code": code}, self.db))
