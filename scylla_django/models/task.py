"""Task and TaskQuerySet. The Task methods and the TaskQuerySet set operations are the state
machine of `enums.TRANSITIONS` (docs/discussions/correctness.md): each transition is one
conditional write on the database clock, fenced by status (and by the owner and lease number,
for worker operations), with its History row in the same transaction.

The set operations that take more than one statement live in rooms of their own, each named
after its concept, and the queryset methods here are their public face: `submission` (submit,
submit_many), `held` (a worker's set operations on the leases it holds: heartbeat_many,
yield_many, finish_many, finish_and_lease, the base of TaskQuerySet), `finishing` (what
finish_many and finish_and_lease write), `successors` (retries), `maintenance` (reset_expired,
purge). The operations of a lease's holder other than its heartbeat and finish (lock, yield,
lapse, snooze, park, a step, a cursor, a wait) are `lease_holder`'s, a base of Task. Every
statement a vendor writes its own way is its driver's (`db.driver`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar, Unpack

from django.db import models, router, transaction
from django.db.models import Exists, Q
from django.utils import timezone

from .. import db, logs, signals, validation
from ..conf import scylla_settings
from ..db import NOT_YIELDED, Clock, Now, capped_deadline, due, unexpired
from ..enums import (
    TERMINAL_STATUSES,
    TRANSITIONS,
    Liveness,
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
    QUEUE_MAX_LENGTH,
    RN_MAX_LENGTH,
    queue_validator,
    rn_validator,
    validate_errors,
    validate_json,
    validate_progress,
    validate_queue,
    validate_timeout,
)
from . import (
    deletions,
    keys,
    maintenance,
    submission,
    successors,
    task_pauses,
    waits,
)
from .admission import Admission
from .batches import count_finished
from .children import spawn, validate_children
from .dependencies import AFTER_PARENTS
from .forecast import Forecast, WhatIf, forecast
from .held import HeldLeaseQuerySet
from .history import History
from .inputs import SubmitOutcome, TaskOptions, task_values, validate_terminal_statuses
from .lease_holder import LeaseHolderOperations
from .notices import send_each_on_commit, send_on_commit
from .origins import Submitter, TaskOrigin
from .processes import Worker, lease_terms, required_worker_id, worker_name
from .queues import QueueSummary, queue_summaries, ready_summary
from .refusals import lease_reset_refusal
from .steps import Step
from .tables import tables
from .task_columns import (
    BatchColumns,
    DeadLetterColumns,
    FairShareColumns,
    FamilyColumns,
    LeaseKeyColumns,
    NotificationColumns,
    RetryColumns,
    SpecVersionColumns,
    TaskLogColumns,
    UniqueKeyColumns,
    UsageColumns,
)
from .traces import forget_traces, take_traceparent
from .unique import UNIQUE_HOLDER, Submitted
from .waits import TaskSignal, Wait

# What a form says of an rn that is taken (the constraint on Task.rn).
_RN_TAKEN = "A task with this rn exists."


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
        terms = lease_terms(
            required_worker_id(name),
            name,
            queues,
            limit,
            lease_length,
            timeouts,
            timeout_grace,
            reservation,
        )
        leased = db.driver(self.db).lease(TABLES, terms)
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
        task: Task | None = db.driver(self.db).lease_rn(TABLES, pk, name, rn, length)
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
        if signals.task_finished.has_listeners(Task):
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
        """Terminal tasks not updated for `older_than` (default `SCYLLA['RETENTION']`;
        `timedelta(0)`: whatever their age, even one finished this instant, which a clock of
        millisecond steps, SQLite's, cannot tell from now). Dead letters are kept until an
        operator requeues or discards them, unless `dead` (an operator deleting the tasks
        chosen)."""
        chosen = validate_terminal_statuses(statuses)
        qs = self.filter(status__in=chosen)
        if not (isinstance(older_than, timedelta) and older_than == timedelta(0)):
            age = validate_timeout(scylla_settings.RETENTION if older_than is None else older_than)
            qs = qs.filter(updated__lt=db.now_plus(-age))
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


class Task(
    LeaseHolderOperations,
    RetryColumns,
    FamilyColumns,
    UniqueKeyColumns,
    LeaseKeyColumns,
    FairShareColumns,
    UsageColumns,
    BatchColumns,
    DeadLetterColumns,
    TaskLogColumns,
    NotificationColumns,
    SpecVersionColumns,
):
    """A unit of work: submitted by a client, leased and finished by a worker.

    The class declares the state machine's own columns: status, lease, run-time limit, the
    handler's start, expiry. Each feature's columns are declared by an abstract model of
    `task_columns` (the lease reads some of them too: the keys, the turn). Its fields are
    described in docs/reference/task.md.
    """

    id = models.BigAutoField(primary_key=True)
    rn = models.CharField(max_length=RN_MAX_LENGTH, validators=[rn_validator])
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH, validators=[queue_validator])
    spec = models.JSONField()
    priority = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    progress = models.FloatField(default=0.0)
    created = models.DateTimeField(db_default=Now(), editable=False)
    updated = models.DateTimeField(db_default=Now(), editable=False)
    not_before = models.DateTimeField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    result = models.JSONField(null=True, blank=True)
    # Null, not "": a task has no owner until its first lease, and CHECKs test IS NULL.
    owner = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    deadline = models.DateTimeField(null=True, blank=True)
    leases = models.PositiveIntegerField(default=0)
    # The length of the current lease: a heartbeat given none extends the lease by this much.
    lease_length = models.DurationField(null=True, blank=True, editable=False)
    # The task's run-time limit (docs/howto/timeouts.md); null: its handler's, else its
    # queue's (`SCYLLA['TIMEOUTS']`), else none.
    timeout = models.DurationField(null=True, blank=True)
    # The database time past which the current lease is never extended: its start plus its
    # run-time limit and TIMEOUT_GRACE, written by the lease (null: no limit). The lease's
    # deadline and every heartbeat's are capped here, so a lease that expires at exactly this
    # time ran into its limit: the monitor aborts the task with `timeout` instead of making it
    # ready again.
    timeout_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Whether the database knows that the current lease's handler has started. A worker's
    # lease is first a reservation (`lease(reservation=...)`: prefetched or leased beside
    # others, the task may wait for a handler); the heartbeat that reports its handler's
    # start makes it a full lease, and so does the start a worker records before it runs a
    # task whose earlier lease expired unstarted (`unstarted > 0`). A lease made without a
    # reservation (an HTTP worker's, a run by hand) is started from the first.
    handler_started = models.BooleanField(default=True, db_default=True, editable=False)
    # Leases of the task that expired before their handler was known to have started (its
    # worker crashed with the task prefetched, or running another task): the monitor made it
    # ready again, and `MAX_LEASES` does not count them (but the first, once the task has
    # killed a worker with its start recorded: see `db.expiry.expiry_kind`).
    unstarted = models.PositiveIntegerField(
        "unstarted leases", default=0, db_default=0, editable=False
    )
    # A ready task not started by then is never leased, and the monitor cancels it (`expired`).
    expires_at = models.DateTimeField(null=True, blank=True)

    #: What the `submit()` that returned this task did: "inserted" it, found it holding the
    #: unique key asked for ("duplicate", returned as it is) or "replaced" its spec; None on a
    #: task that was read, not submitted.
    submit_outcome: Submitted | None = None

    objects: ClassVar[TaskQuerySet] = TaskQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        # No default ordering: a query over the hottest table orders only when it asks to
        # (the admin and the API list newest first, explicitly).
        permissions = [
            ("submit_task", "Can submit tasks"),
            ("cancel_task", "Can cancel tasks"),
            ("cancel_own_task", "Can cancel the tasks one submitted"),
            ("work_task", "Can lease and finish tasks as a worker"),
        ]
        indexes = [
            models.Index(
                fields=["queue", "-priority", "turn", "created", "id"],
                name="scylla_task_ready_idx",
                condition=Q(status="ready"),
            ),
            # Fair shares (db.fairness): the last ready turn of a key, read per new task.
            models.Index(
                fields=["queue", "fair_key", "priority", "turn"],
                name="scylla_task_fair_idx",
                condition=Q(status="ready", fair_key__isnull=False),
            ),
            models.Index(
                fields=["deadline"], name="scylla_task_running_idx", condition=Q(status="running")
            ),
            models.Index(
                fields=["updated"],
                name="scylla_task_terminal_idx",
                condition=Q(status__in=["aborted", "cancelled", "completed"]),
            ),
            models.Index(
                fields=["id"],
                name="scylla_task_notify_idx",
                condition=Q(notify__isnull=False, notified__isnull=True),
            ),
            models.Index(fields=["queue", "status"], name="scylla_task_queue_status_idx"),
            # The admin's owner filter and worker-name search; unleased tasks are not indexed.
            models.Index(
                fields=["owner", "-id"],
                name="scylla_task_owner_idx",
                condition=Q(owner__isnull=False),
            ),
            # Every task of a key, for the admin's key filter and search (keyless tasks are
            # not indexed).
            models.Index(
                fields=["unique_key", "-id"],
                name="scylla_task_unique_key_idx",
                condition=Q(unique_key__isnull=False),
            ),
            # Order keys (db.keys): the tasks of a key that may keep a later one waiting.
            models.Index(
                fields=["order_key", "status"],
                name="scylla_task_order_idx",
                condition=Q(order_key__isnull=False),
            ),
            # A task's children (the task page, `?parent=`); tasks without a parent are not
            # indexed.
            models.Index(
                fields=["parent", "-id"],
                name="scylla_task_parent_idx",
                condition=Q(parent__isnull=False),
            ),
            # The ready tasks that expire, for the monitor's expiry pass.
            models.Index(
                fields=["expires_at"],
                name="scylla_task_expiry_idx",
                condition=Q(status="ready", expires_at__isnull=False),
            ),
            models.Index(
                fields=["root", "attempt"],
                name="scylla_task_root_idx",
                condition=Q(root__isnull=False),
            ),
            # A batch's tasks by status (its results in pages, a cancel of the whole batch).
            models.Index(
                fields=["batch", "status", "id"],
                name="scylla_task_batch_idx",
                condition=Q(batch__isnull=False),
            ),
            # Dead letters, by queue and age (the admin's list, the metric).
            models.Index(
                fields=["queue", "dead"],
                name="scylla_task_dead_idx",
                condition=Q(dead__isnull=False),
            ),
        ]
        constraints = [
            # Not `unique=True`: on PostgreSQL it adds a LIKE index no query uses, inserts pay.
            models.UniqueConstraint(
                fields=["rn"], name="scylla_task_rn_unique", violation_error_message=_RN_TAKEN
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=0, priority__lte=255), name="scylla_task_priority_range"
            ),
            models.CheckConstraint(
                condition=Q(progress__gte=0.0, progress__lte=1.0), name="scylla_task_progress_range"
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in Status]), name="scylla_task_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status="running") | Q(owner__isnull=False, deadline__isnull=False),
                name="scylla_task_running_has_lease",
            ),
            # One holder per unique key (see the fields above).
            models.UniqueConstraint(
                fields=["unique_key"],
                name="scylla_task_unique_key",
                condition=UNIQUE_HOLDER,
                violation_error_message="A task holds this unique key.",
            ),
            # A chain never forks: each task is followed by at most one retry.
            models.UniqueConstraint(
                fields=["retry_of"],
                name="scylla_task_one_retry",
                condition=Q(retry_of__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rn} ({self.queue}, {self.status})"

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        queue: str,
        spec: Any,
        **options: Unpack[TaskOptions],
    ) -> Task:
        """A validated, unsaved task. Raises ValidationError naming every bad field."""
        values = task_values(queue, spec, **options)
        take_traceparent(values)
        return cls(**values)

    @classmethod
    def inserted(cls, using: str, values: Mapping[str, Any], **filled: Any) -> Task:
        """The task just inserted with `values` and the columns the database `filled` in (its
        key, `created`, `updated`); every other field at its default.

        Built as a query builds its rows: the model's positional constructor, a quarter of the
        cost of the keyword one that `Task(**values)` takes, per submitted task; from a row of
        the fields' defaults made once (`default_row`), with a new value only where a default
        is made afresh for each instance.
        """
        template, fresh, positions = default_row(cls)
        row = list(template)
        for index, field in fresh:
            row[index] = field.get_default()
        for name, value in values.items():
            row[positions[name]] = value
        for name, value in filled.items():
            row[positions[name]] = value
        return cls.from_db(using, (), row)

    # -- transitions ------------------------------------------------------------------------

    def heartbeat(
        self,
        worker: Worker | str,
        *,
        progress: float | None = None,
        lease_length: timedelta | float | None = None,
        lease: int | None = None,
    ) -> None:
        """Extend the lease: `deadline = now + lease_length`, and record `progress` if given.

        Without `lease_length`, the lease is extended by its own length (the one it was leased
        with); never past `timeout_at`, the run-time limit the lease was given (a heartbeat
        sent after it leaves the deadline there, in the past). Only the holder of the lease
        (owner and lease number) may heartbeat. Raises
        TaskCancelled if the task was cancelled (stop working on it), LeaseLost if the lease
        was reset or taken over. `lease` is the lease number the write is fenced on (this
        object's `leases`, as leased, if not given); so for `complete`, `abort` and
        `yield_lease`.
        """
        if lease_length is None:
            lease_length = self.lease_length or scylla_settings.LEASE_LENGTH
        length = validate_timeout(lease_length)
        values: dict[str, Any] = {"deadline": capped_deadline(db.now_plus(length, Clock))}
        if progress is not None:
            values["progress"] = validate_progress(progress)
        self._apply(
            Operation.HEARTBEAT,
            worker,
            values,
            refresh=["deadline", "progress"],
            fence=NOT_YIELDED,
            lease=lease,
        )

    def complete(
        self,
        worker: Worker | str,
        result: Any = None,
        *,
        lease: int | None = None,
        children: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[str]:
        """running → completed, with progress 1.0 and an optional JSON `result`.

        `children` (each `{queue, spec, **submit options}`) are submitted in the same
        transaction, naming this task in `parent`, as `ctx.spawn()`'s are: validated first
        (ValidationError, nothing written), and not at all if the write is refused. Returns
        the children's rns (a child whose rn exists is skipped, as a resubmission is).
        """
        values = {
            "status": Status.COMPLETED,
            "progress": 1.0,
            "deadline": None,
            "result": validate_json(result, "result", allow_null=True),
        }
        spawned = validate_children(children, self.rn) if children else []
        if self.batch_id is None and not spawned:
            self._apply(Operation.COMPLETE, worker, values, lease=lease)
            return []
        using = self._state.db or "default"
        with db.write_atomic(using):
            self._apply(Operation.COMPLETE, worker, values, lease=lease)
            if self.batch_id is not None:
                count_finished(using, [{"batch_id": self.batch_id, "status": self.status}])
            spawn(Task.objects.using(using), spawned)
        return [child["rn"] for child in spawned]

    def abort(
        self,
        worker: Worker | str,
        errors: Any,
        *,
        retry: bool | None = None,
        lease: int | None = None,
    ) -> Task | None:
        """running → aborted, recording `errors` (at least one `{code, args, description}`).

        Running tasks carry no errors (only an abort writes them, and it ends the task), so the
        errors written are exactly the ones appended.

        With a retry policy (the task's own, else its handler's) that covers the errors, or with
        `retry=True`, a successor task is submitted in the same transaction as the abort and
        returned (see `scylla_django.retries`); `retry=False` never retries. Returns None when
        no successor was submitted; the task is then dead (`dead` set: a dead letter).
        """
        cleaned = validate_errors(errors)
        values: dict[str, Any] = {"status": Status.ABORTED, "deadline": None, "errors": cleaned}
        policy = successors.retry_decision(self, cleaned, retry)
        refresh = ("status", "progress", "deadline", "owner", "errors", "result", "dead")
        using = self._state.db or "default"
        if policy is None:
            values["dead"] = Clock()
            if self.batch_id is None:
                self._apply(Operation.ABORT, worker, values, refresh=refresh, lease=lease)
                return None
            with db.write_atomic(using):
                self._apply(Operation.ABORT, worker, values, refresh=refresh, lease=lease)
                count_finished(using, [{"batch_id": self.batch_id, "status": self.status}])
            return None
        with db.write_atomic(using):
            self._apply(Operation.ABORT, worker, values, lease=lease)
            successor: Task | None = successors.submit_retry(self, policy, using)
            if successor is None:
                successors.give_up(Task.objects.using(using), {self.pk})
            return successor

    def retry(self) -> Task:
        """Resubmit this aborted or cancelled task by hand, as the next attempt of its chain.

        The new task is ready at once (no backoff) and linked like an automatic retry. Raises
        InvalidTransition unless the task is aborted or cancelled, DuplicateTask if it was
        already followed by a retry.
        """
        successor: Task = successors.resubmit(self)
        return successor

    # -- operators: one task ------------------------------------------------------------------

    def pause(self, *, by: str | None = None) -> None:
        """Keep this ready task from every lease until `resume()`, without cancelling
        it (see `scylla_django.models.task_pauses`); `by` names who paused it. Raises TaskPaused
        (paused already), InvalidTransition (not ready, or a follow-up waiting for its parents),
        TaskNotFound; nothing is written then."""
        task_pauses.pause(self, by)

    def resume(self) -> None:
        """End the hold on this task: its own `not_before` back, leasable as before. Raises
        NotPaused (not held, or cancelled meanwhile: the hold is dropped), TaskNotFound."""
        task_pauses.resume(self)

    @property
    def is_paused(self) -> bool:
        """Whether this task is on an operator's hold (`hold()`)."""
        return task_pauses.is_paused(self)

    def delete_ready(self, *, by: str | None = None) -> deletions.TaskDeletion:
        """Delete this task if it has not started (ready), keeping a `TaskDeletion` record of
        it with its History; `by` names who deleted it. Raises TaskStarted (running or
        finished), InvalidTransition (cancelled, in a batch, with an order key), TaskNotFound;
        nothing is written then (see `scylla_django.models.deletions`)."""
        return deletions.delete_ready(self, by)

    def submitted_by(self) -> Any:
        """The pk of the user who submitted this task (None: the system, or a user since
        deleted)."""
        return (
            TaskOrigin.objects.using(self._state.db)
            .filter(task_id=self.pk)
            .values_list("user_id", flat=True)
            .first()
        )

    def forecast(self, what_if: WhatIf | None = None) -> Forecast:
        """When this ready task is expected to start, and the rule that decides it (under
        `what_if`'s changed rules, if given): see `models.forecast`. Reads only."""
        return forecast(self, what_if)

    def waiting_reasons(self) -> list[dict[str, Any]]:
        """Why this ready task is not running now (its not_before, parents, paused queue, and
        each lock, limit, order key or rate that is not free): see `keys.waiting_reasons`."""
        return keys.waiting_reasons(self)

    def signal(self, name: str, payload: Any = None) -> None:
        """Send the signal `name` with `payload` (JSON) to this task: kept for it until a
        `ctx.wait_for(signal=name)` takes it, and waking the task at once if it waits for it
        (docs/howto/durable.md). A signal is delivered once: a second one of the same
        name raises SignalAlreadySent; one to a finished task raises TaskFinished; a bad name
        or payload raises ValidationError. Nothing is written when it raises."""
        waits.send_signal(self, name, payload)

    def cancel(self) -> None:
        """ready/running → cancelled (terminal). A running worker learns on its next write.

        Raises InvalidTransition if the task is already terminal. On PostgreSQL, the worker
        running it is notified on STOP_CHANNEL.
        """
        values = {"status": TRANSITIONS[Operation.CANCEL].target, "deadline": None}
        # Only a running task has an owner (a reset clears it): notify that owner.
        notify = (db.STOP_CHANNEL, "owner")
        if self.batch_id is None:
            self._apply(Operation.CANCEL, None, values, notify=notify)
            return
        using = self._state.db or "default"
        with db.write_atomic(using):
            self._apply(Operation.CANCEL, None, values, notify=notify)
            count_finished(using, [{"batch_id": self.batch_id, "status": self.status}])

    def _apply(
        self,
        operation: Operation,
        worker: Worker | str | None,
        values: dict[str, Any],
        refresh: Sequence[str] = ("status", "progress", "deadline", "owner", "errors", "result"),
        fence: Q | None = None,
        notify: tuple[str, str] | None = None,
        lease: int | None = None,
        logged_worker: str | None = None,
    ) -> None:
        """Make `operation` on this task: one conditional write of `values`, fenced by the
        operation's source statuses (and by `fence`, and for a worker operation by owner and
        lease number), with its History row; then refresh the fields `refresh` from the row.

        `lease` is the lease number a worker operation is fenced on: the task's `leases`
        as it was leased (this object's, if not given). `notify` is a (channel, field) pair:
        on PostgreSQL the statement notifies the channel with that field's value.
        `logged_worker` is the worker the History row names, for a write that clears the
        owner (the row's owner after the write otherwise). A write that matches no row raises
        the specific refusal.
        """
        transition = TRANSITIONS[operation]
        name = worker_name(worker) if worker is not None else None
        held = self.leases if lease is None else lease
        using = self._state.db or "default"
        fenced = Task.objects.using(using).filter(pk=self.pk, status__in=sources(operation))
        if fence is not None:
            fenced = fenced.filter(fence)
        if transition.owner_only:
            # Fenced on the lease itself: a late call from an earlier lease of the same worker
            # (reset, then leased again) carries an older lease number and matches nothing.
            fenced = fenced.filter(owner=name, leases=held)
        fields = [*refresh, "updated"]
        # The History row names the owner: the worker itself for a worker operation (the fence
        # checked owner = worker), the worker it is taken from for a cancel.
        row = db.driver(using).transition(
            fenced,
            History,
            {"updated": Clock(), **values},
            fields,
            operation,
            notify,
            worker=logged_worker,
        )
        if row is None:
            raise self._refusal(operation, name, held, using)
        for field_name, value in row.items():
            setattr(self, field_name, value)
        if transition.target in TERMINAL_STATUSES:
            send_on_commit(signals.task_finished, using, task=self, status=self.status)

    def _refusal(
        self, operation: Operation, worker: str | None, lease: int, using: str
    ) -> Exception:
        """The specific error for a conditional write that matched no row."""
        current = Task.objects.using(using).filter(pk=self.pk).values("status").first()
        if current is None:
            return TaskNotFound(f"No task has rn {self.rn!r}.", rn=self.rn)
        status = current["status"]
        if TRANSITIONS[operation].owner_only:
            if worker is None:
                raise TypeError(f"{operation} is a worker's operation: name the worker")
            return Task.objects.using(using).refusals(worker, {self.pk: lease})[self.pk]
        return InvalidTransition(
            f"Cannot {operation} task {self.rn}: it is {status}.", rn=self.rn, status=status
        )

    def delete(self, using: Any = None, keep_parents: bool = False) -> tuple[int, dict[str, int]]:
        """Delete the task and its History."""
        return Task.objects.using(using or self._state.db).filter(pk=self.pk).delete()

    # -- reading ----------------------------------------------------------------------------

    def children_rns(self, limit: int | None = None) -> list[str]:
        """The rns of the tasks this task spawned (`ctx.spawn`), oldest first, at most
        `limit`."""
        using = self._state.db or "default"
        rns = Task.objects.using(using).filter(parent=self.rn).order_by("id")
        found = rns.values_list("rn", flat=True)
        return list(found if limit is None else found[:limit])

    @property
    def is_terminal(self) -> bool:
        """Completed, aborted or cancelled: no transition leads out of it."""
        return self.status in TERMINAL_STATUSES

    @property
    def is_expired(self) -> bool:
        """Running past its deadline (by this host's clock; for display only)."""
        return (
            self.status == Status.RUNNING
            and self.deadline is not None
            and self.deadline < timezone.now()
        )

    # -- the spec ---------------------------------------------------------------------------

    def upgrade_spec(self, worker: Worker | str, spec: Any, version: int) -> None:
        """Write `spec` as this task's spec of `version`, upgraded by its queue's migrations
        (`@handler.migrates`) before its handler runs: one conditional write fenced on the
        lease (running, owned by `worker`, lease number `leases`).

        Not a transition: the status, the lease and `updated` are left as they are. Raises
        LeaseLost or TaskCancelled (nothing written) when the lease is no longer held;
        ValidationError if the upgraded spec is not JSON, or too large.
        """
        name = worker_name(worker)
        using = self._state.db or "default"
        value = validate_json(spec, "spec", limit=scylla_settings.SPEC_SIZE_LIMIT)
        written = (
            Task.objects.using(using)
            .filter(
                pk=self.pk,
                status__in=sources(Operation.COMPLETE),
                owner=name,
                leases=self.leases,
            )
            .update(spec=value, version=version)
        )
        if not written:
            raise self._refusal(Operation.COMPLETE, name, self.leases, using)
        self.spec, self.version = value, version

    # -- logs -------------------------------------------------------------------------------

    def keep_log(self, text: str) -> None:
        """Store `text` as this task's log (see `scylla_django.logs`) and name it on the row;
        nothing when no log storage is named.

        Not a transition: the row's status, lease and `updated` are left as they are.
        """
        name = logs.save_log(self.rn, text)
        if name is None:
            return
        using = self._state.db or "default"
        Task.objects.using(using).filter(pk=self.pk).update(log=name)
        self.log = name

    def read_log(self) -> str | None:
        """This task's log, or None if no run of it logged anything (or it was deleted)."""
        return logs.read_log(self.log) if self.log else None

    # -- operators --------------------------------------------------------------------------

    def reset_lease(self, owner: str, lease: int) -> None:
        """ "Reset lease now": running → ready at once, for a lease whose worker is gone.

        Fenced on what the operator saw: the task must still be running, held by `owner` under
        lease number `lease` (its `lease`-th assignment), and `owner` must not be alive (it is
        silent, dead, stopped or unknown). The owner and deadline are cleared, progress goes
        back to 0 and a TaskTimeout{owner, progress} row is written, as when the monitor
        resets an expired lease. If the worker resumes, its next write fails with LeaseLost.

        Raises OwnerAlive, LeaseLost (another owner or lease now), InvalidTransition (not
        running) or TaskNotFound; nothing is written then.
        """
        transition = TRANSITIONS[Operation.RESET_LEASE]
        event = transition.recorded
        using = self._state.db or "default"
        alive = Worker.objects.using(using).filter(
            Worker.objects.state_q(Liveness.ALIVE), pk=validation.worker_id(owner) or 0
        )
        fenced = Task.objects.using(using).filter(
            ~Exists(alive),
            pk=self.pk,
            status__in=sources(Operation.RESET_LEASE),
            owner=owner,
            leases=lease,
        )
        with db.write_atomic(using):
            row = fenced.select_for_update().values("progress").first()
            if row is None or not fenced.update(
                status=transition.target, owner=None, deadline=None, progress=0.0, updated=Now()
            ):
                raise lease_reset_refusal(self, owner, lease, using)
            History.objects.using(using).create(
                task=self, typ=event, worker=owner, progress=row["progress"]
            )
            self.refresh_from_db(
                using=using, fields=["status", "owner", "deadline", "progress", "updated"]
            )
        send_on_commit(signals.task_reset, using, task=self, status=self.status)


TABLES = tables(Task)
"""The models the PostgreSQL lease and finish statements name (`db.Tables`)."""


#: Default values that one row may share with the next: nothing in them can be changed in place.
_SHARED_DEFAULTS = (type(None), str, int, float, bool, timedelta)


@functools.cache
def default_row(
    model: type[models.Model],
) -> tuple[tuple[Any, ...], tuple[tuple[int, models.Field[Any, Any]], ...], dict[str, int]]:
    """The row of `model`'s concrete fields at their defaults, for `Task.inserted`: the
    defaults every row may share, the fields (with their places) whose default is made afresh
    for each row (a callable's, such as a new list, or the database's own), and each field's
    place by attribute name."""
    template: list[Any] = []
    fresh: list[tuple[int, models.Field[Any, Any]]] = []
    for index, field in enumerate(model._meta.concrete_fields):
        value = field.get_default()
        made = field.has_default() and callable(field.default)  # a new one per call
        shared = not made and isinstance(value, _SHARED_DEFAULTS)
        template.append(value if shared else None)
        if not shared:
            fresh.append((index, field))
    positions = {f.attname: i for i, f in enumerate(model._meta.concrete_fields)}
    return tuple(template), tuple(fresh), positions
