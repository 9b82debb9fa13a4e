"""Task, History and Worker. The Task methods and the TaskQuerySet set operations are the state
machine of SPEC §3: each transition is one conditional write on the database clock, fenced by
status (and owner, for worker operations), with its History row in the same transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, ClassVar, Literal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connections, models, transaction
from django.db.models import Case, F, FloatField, Max, Q, Value, When
from django.dispatch import Signal
from django.utils import timezone

from . import db, signals
from .conf import scylla_settings
from .db import Now
from .enums import (
    TERMINAL_STATUSES,
    TRANSITIONS,
    EventType,
    Operation,
    Status,
    sources,
)
from .exceptions import (
    DuplicateTask,
    InvalidTransition,
    LeaseLost,
    ScyllaError,
    TaskCancelled,
    TaskNotFound,
    WorkerNotFound,
)
from .validation import (
    QUEUE_MAX_LENGTH,
    RN_MAX_LENGTH,
    queue_validator,
    rn_validator,
    validate_errors,
    validate_json,
    validate_limit,
    validate_priority,
    validate_progress,
    validate_queue,
    validate_queues,
    validate_rn,
    validate_timeout,
)

WORKER_PREFIX = "worker-"


def worker_name(worker: Worker | str) -> str:
    """The name a task's `owner` holds for `worker` (a Worker or its name)."""
    return worker.name if isinstance(worker, Worker) else worker


def _later(signal: Signal, using: str, **kwargs: Any) -> None:
    """Send `signal` once the current transaction commits (at once outside a transaction).

    Nothing is scheduled when no receiver is connected: leases and bulk submissions call this
    once per task.
    """
    if signal.has_listeners(Task):
        transaction.on_commit(partial(signal.send, sender=Task, **kwargs), using=using)


def _now_plus(delta: timedelta) -> models.Expression:
    return models.ExpressionWrapper(Now() + Value(delta), output_field=models.DateTimeField())


@dataclass(frozen=True)
class SubmitOutcome:
    """What happened to one item of `Task.objects.submit_many`."""

    index: int
    rn: str | None
    outcome: Literal["inserted", "duplicate", "invalid"]
    errors: dict[str, list[str]] = field(default_factory=dict)


class TaskQuerySet(models.QuerySet["Task"]):
    """Selections, and the set operations of the state machine (lease, reset, purge)."""

    def ready(self, queues: Sequence[str] | None = None) -> TaskQuerySet:
        """Ready tasks whose `not_before` has passed, optionally on `queues` (exact names)."""
        qs = self.filter(status=Status.READY).filter(
            Q(not_before__isnull=True) | Q(not_before__lte=Now())
        )
        return qs.filter(queue__in=list(queues)) if queues is not None else qs

    def expired(self) -> TaskQuerySet:
        """Running tasks whose lease deadline has passed (on the database clock)."""
        return self.filter(status=Status.RUNNING, deadline__lt=Now())

    def terminal(self) -> TaskQuerySet:
        return self.filter(status__in=sorted(TERMINAL_STATUSES))

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
        priority: int | None = None,
        rn: str | None = None,
        not_before: datetime | None = None,
    ) -> Task:
        """Submit a new `ready` task. Raises ValidationError, or DuplicateTask if `rn` exists."""
        task = self.model.build(queue, spec, priority=priority, rn=rn, not_before=not_before)
        try:
            with transaction.atomic(using=self.db):
                task.save(force_insert=True, using=self.db)
        except IntegrityError as exc:
            if self.filter(rn=task.rn).exists():
                raise DuplicateTask(f"A task with rn {task.rn!r} exists.", rn=task.rn) from exc
            raise
        _later(signals.task_submitted, self.db, task=task)
        return task

    def submit_many(self, items: Iterable[Mapping[str, Any]]) -> list[SubmitOutcome]:
        """Submit several tasks in one round trip; return one outcome per item, in order.

        Each item is a mapping of `submit()`'s arguments (`queue`, `spec`, and optionally
        `priority`, `rn`, `not_before`). Invalid items and duplicate rns (in the database or
        earlier in the same batch) are reported and skipped; the others are inserted.
        """
        outcomes: dict[int, SubmitOutcome] = {}
        pending: list[tuple[int, Task]] = []
        seen: set[str] = set()
        for index, item in enumerate(items):
            try:
                task = self.model.build_from(item)
            except ValidationError as exc:
                rn = item.get("rn") if isinstance(item, Mapping) else None
                outcomes[index] = SubmitOutcome(
                    index, rn if isinstance(rn, str) else None, "invalid", _error_dict(exc)
                )
                continue
            if task.rn in seen:
                outcomes[index] = SubmitOutcome(index, task.rn, "duplicate")
                continue
            seen.add(task.rn)
            pending.append((index, task))

        inserted: set[str] = set()
        connection = connections[self.db]
        if db.can_insert_returning_on_conflict(connection):
            for start in range(0, len(pending), 500):
                chunk = [task for _, task in pending[start : start + 500]]
                inserted |= db.insert_ignoring_duplicates(self.db, chunk)
        else:
            for _, task in pending:
                try:
                    with transaction.atomic(using=self.db):
                        task.save(force_insert=True, using=self.db)
                    inserted.add(task.rn)
                except IntegrityError:
                    pass
        for index, task in pending:
            status: Literal["inserted", "duplicate"] = (
                "inserted" if task.rn in inserted else "duplicate"
            )
            outcomes[index] = SubmitOutcome(index, task.rn, status)
            if status == "inserted":
                _later(signals.task_submitted, self.db, task=task)
        return [outcomes[i] for i in sorted(outcomes)]

    # -- leasing ----------------------------------------------------------------------------

    def lease(
        self,
        worker: Worker | str,
        queues: Sequence[str],
        *,
        limit: int = 1,
        timeout: timedelta | float | None = None,
    ) -> list[Task]:
        """Lease up to `limit` ready tasks from `queues` for `worker`: ready → running.

        Highest priority first, then oldest `created`. Each leased task gets `owner`,
        `deadline = now + timeout` (default `SCYLLA['LEASE_TIMEOUT']`), `attempts + 1` and a
        TaskAssignment History row. No task is ever leased twice: concurrent callers skip each
        other's rows (PostgreSQL) or are serialised (SQLite).
        """
        name = worker_name(worker)
        queues = validate_queues(queues)
        limit = validate_limit(limit)
        lease_for = validate_timeout(scylla_settings.LEASE_TIMEOUT if timeout is None else timeout)
        if db.uses_single_statement_transitions(connections[self.db]):
            tasks = db.postgresql_lease(self.db, name, queues, limit, lease_for)
        else:
            tasks = self._lease_portable(name, queues, limit, lease_for)
        for task in tasks:
            _later(signals.task_leased, self.db, task=task)
        return tasks

    def _lease_portable(
        self, name: str, queues: list[str], limit: int, lease_for: timedelta
    ) -> list[Task]:
        order = ("-priority", "created", "id")
        with db.write_atomic(self.db):
            ids = list(
                self.model.objects.using(self.db)
                .ready(queues)
                .select_for_update(skip_locked=True)
                .order_by(*order)
                .values_list("pk", flat=True)[:limit]
            )
            if not ids:
                return []
            base = self.model.objects.using(self.db).filter(pk__in=ids, status=Status.READY)
            leased = base.update(
                status=Status.RUNNING,
                owner=name,
                deadline=_now_plus(lease_for),
                attempts=F("attempts") + 1,
                updated=Now(),
            )
            if leased != len(ids):  # only possible if the database ignored the row locks
                raise RuntimeError("lease lost a race it should have been protected from")
            History.objects.using(self.db).bulk_create(
                History(task_id=pk, typ=EventType.ASSIGNMENT, worker=name) for pk in ids
            )
            return list(self.model.objects.using(self.db).filter(pk__in=ids).order_by(*order))

    # -- clients ----------------------------------------------------------------------------

    def cancel(self) -> int:
        """Cancel every ready or running task of this queryset; return how many were cancelled.

        Tasks in other statuses are skipped (the count tells how many). Each cancelled task gets
        a TaskCancellation row, as with `Task.cancel()`; the rows are locked first, so a
        concurrent completion either commits before (the task is skipped) or fails after.
        """
        manager = self.model.objects.using(self.db)
        active = sources(Operation.CANCEL)
        with db.write_atomic(self.db):
            rows = list(
                self.filter(status__in=active)
                .select_for_update()
                .order_by("pk")
                .values("pk", "owner", "progress")
            )
            if not rows:
                return 0
            ids = [row["pk"] for row in rows]
            cancelled = manager.filter(pk__in=ids, status__in=active).update(
                status=Status.CANCELLED, deadline=None, updated=Now()
            )
            History.objects.using(self.db).bulk_create(
                History(
                    task_id=row["pk"],
                    typ=EventType.CANCELLATION,
                    worker=row["owner"],
                    progress=row["progress"],
                )
                for row in rows
            )
        if signals.task_finished.has_listeners(Task):
            for task in manager.filter(pk__in=ids):
                _later(signals.task_finished, self.db, task=task, status=task.status)
        return cancelled

    # -- monitor ----------------------------------------------------------------------------

    def reset_expired(self, *, batch_size: int | None = None) -> int:
        """Deal with every expired lease; return how many tasks were reset or aborted.

        An expired running task becomes ready (owner and deadline cleared, progress 0) with a
        TaskTimeout{worker, progress} row, unless its last History row is a TaskYield, in which
        case no TaskTimeout is written. A timed-out task that has had `SCYLLA['MAX_ATTEMPTS']`
        assignments is aborted with the error `max_attempts_exceeded` instead. Any number of
        monitors may run this at once: each expiry is handled exactly once.
        """
        size = batch_size or scylla_settings.RESET_BATCH_SIZE
        total = 0
        while True:
            done = self._reset_batch(size)
            total += done
            if done < size:
                return total

    def _reset_batch(self, size: int) -> int:
        manager = self.model.objects.using(self.db)
        with db.write_atomic(self.db):
            rows = list(
                manager.expired()
                .select_for_update(skip_locked=True)
                .order_by("deadline")
                .values("pk", "owner", "progress", "attempts")[:size]
            )
            if not rows:
                return 0
            ids = [row["pk"] for row in rows]
            # Read after the rows are locked (a fresh snapshot), so a yield that committed while
            # we waited is seen and no TaskTimeout is written after it.
            last_ids = (
                History.objects.using(self.db)
                .filter(task_id__in=ids)
                .values("task_id")
                .annotate(last=Max("id"))
                .values("last")
            )
            yielded = set(
                History.objects.using(self.db)
                .filter(pk__in=last_ids, typ=EventType.YIELD)
                .values_list("task_id", flat=True)
            )
            max_attempts = scylla_settings.MAX_ATTEMPTS
            exhausted = {
                row["pk"]
                for row in rows
                if row["pk"] not in yielded
                and max_attempts is not None
                and row["attempts"] >= max_attempts
            }
            running = manager.filter(status=Status.RUNNING)
            running.filter(pk__in=set(ids) - exhausted).update(
                status=Status.READY, owner=None, deadline=None, progress=0.0, updated=Now()
            )
            if exhausted:
                running.filter(pk__in=exhausted).update(
                    status=Status.ABORTED,
                    deadline=None,
                    errors=[
                        {
                            "code": "max_attempts_exceeded",
                            "args": {"max_attempts": max_attempts},
                            "description": f"The lease expired after {max_attempts} attempts.",
                        }
                    ],
                    updated=Now(),
                )
            events = []
            for row in rows:
                if row["pk"] in yielded:
                    continue
                events.append(
                    History(
                        task_id=row["pk"],
                        typ=EventType.TIMEOUT,
                        worker=row["owner"],
                        progress=row["progress"],
                    )
                )
                if row["pk"] in exhausted:
                    events.append(History(task_id=row["pk"], typ=EventType.ABORT))
            History.objects.using(self.db).bulk_create(events)
        if signals.task_reset.has_listeners(Task) or signals.task_finished.has_listeners(Task):
            for task in manager.filter(pk__in=ids):
                signal = signals.task_finished if task.pk in exhausted else signals.task_reset
                _later(signal, self.db, task=task, status=task.status)
        return len(rows)

    def purgeable(
        self,
        older_than: timedelta | None = None,
        statuses: Iterable[str] | None = None,
        queue: str | None = None,
    ) -> TaskQuerySet:
        """Terminal tasks not updated for `older_than` (default `SCYLLA['RETENTION']`)."""
        age = validate_timeout(scylla_settings.RETENTION if older_than is None else older_than)
        chosen = _terminal_statuses(statuses)
        qs = self.filter(status__in=chosen, updated__lt=_now_plus(-age))
        return qs.filter(queue=validate_queue(queue)) if queue is not None else qs

    def purge(
        self,
        older_than: timedelta | None = None,
        statuses: Iterable[str] | None = None,
        queue: str | None = None,
        *,
        batch_size: int | None = None,
        on_batch: Callable[[int], object] | None = None,
    ) -> int:
        """Delete purgeable tasks (and their History) in batches; return how many were deleted.

        Each batch is its own transaction of at most `batch_size` (default
        `SCYLLA['PURGE_BATCH_SIZE']`) tasks, and no row is loaded into Python. Only terminal
        tasks are ever deleted: `statuses` must be a subset of completed/aborted/cancelled.
        `on_batch(n)` is called after each committed batch with the number it deleted.
        """
        size = batch_size or scylla_settings.PURGE_BATCH_SIZE
        candidates = self.purgeable(older_than, statuses, queue)
        terminal = self.model.objects.using(self.db).terminal()
        total = 0
        while True:
            with db.write_atomic(self.db):
                ids = list(candidates.order_by().values_list("pk", flat=True)[:size])
                if not ids:
                    return total
                deleted = terminal.filter(pk__in=ids).delete()[0]
            total += deleted
            if on_batch is not None:
                on_batch(deleted)
            if len(ids) < size:
                return total

    def delete(self) -> tuple[int, dict[str, int]]:
        """Delete these tasks and their History; the count covers tasks only.

        History's foreign key is DO_NOTHING so that Django can delete tasks with one DELETE
        instead of loading them; the History rows go first, in the same transaction.
        """
        with transaction.atomic(using=self.db):
            History.objects.using(self.db).filter(task__in=self.order_by().values("pk")).delete()
            _, per_model = super().delete()
        count = per_model.get(self.model._meta.label, 0)
        return count, {self.model._meta.label: count}

    delete.alters_data = True  # type: ignore[attr-defined]
    delete.queryset_only = True  # type: ignore[attr-defined]

    # -- worker set operations --------------------------------------------------------------

    def heartbeat_many(
        self,
        worker: Worker | str,
        leases: Mapping[int, tuple[int, float | None]],
        *,
        timeout: timedelta | float | None = None,
    ) -> set[int]:
        """Extend several leases of `worker` in one statement; return the pks it extended.

        `leases` maps a task pk to `(attempts, progress)`: a lease is the task's `attempts` when
        it was leased, so a late call from an earlier lease of the same task is refused, and a
        progress of None leaves the progress as it is. Each row is fenced as `Task.heartbeat()`
        fences it (running, owned by `worker`, not yielded). A pk missing from the result was
        cancelled, lost or finished: `refusals()` says which.
        """
        name = worker_name(worker)
        lease_for = validate_timeout(scylla_settings.LEASE_TIMEOUT if timeout is None else timeout)
        if not leases:
            return set()
        held = Q()
        for pk, (attempts, _) in leases.items():
            held |= Q(pk=pk, attempts=attempts)
        fenced = (
            self.model.objects.using(self.db)
            .filter(held, status__in=sources(Operation.HEARTBEAT), owner=name)
            .filter(NOT_YIELDED)
        )
        values: dict[str, Any] = {"deadline": _now_plus(lease_for), "updated": Now()}
        progress = [
            When(pk=pk, then=Value(validate_progress(value)))
            for pk, (_, value) in leases.items()
            if value is not None
        ]
        if progress:
            values["progress"] = Case(*progress, default=F("progress"), output_field=FloatField())
        return db.update_returning_pks(fenced, values)

    def finish_many(self, worker: Worker | str, outcomes: Sequence[Outcome]) -> set[int]:
        """Complete or abort several leases of `worker` at once; return the pks finished.

        An outcome with `errors` aborts its task (running → aborted), one without completes it
        (running → completed, progress 1.0, with its `result`). Each row is fenced on its lease
        (running, owned by `worker`, the same `attempts`) and gets its TaskCompletion/TaskAbort
        row in the same transaction (on PostgreSQL, in the same statement). A pk missing from the
        result was not written: `refusals()` says why.
        """
        name = worker_name(worker)
        rows = [
            {
                "id": outcome.pk,
                "attempts": outcome.attempts,
                "status": Status.COMPLETED if outcome.errors is None else Status.ABORTED,
                "result": validate_json(outcome.result, "result", allow_null=True)
                if outcome.errors is None
                else None,
                "errors": None if outcome.errors is None else validate_errors(outcome.errors),
            }
            for outcome in outcomes
        ]
        if not rows:
            return set()
        if db.uses_single_statement_transitions(connections[self.db]):
            done = db.postgresql_finish(self.db, name, rows)
        else:
            done = self._finish_portable(name, rows)
        if done and signals.task_finished.has_listeners(Task):
            for task in self.model.objects.using(self.db).filter(pk__in=done):
                _later(signals.task_finished, self.db, task=task, status=task.status)
        return done

    def _finish_portable(self, name: str, rows: list[dict[str, Any]]) -> set[int]:
        manager = self.model.objects.using(self.db)
        done: set[int] = set()
        with db.write_atomic(self.db):
            for row in rows:
                completed = row["status"] == Status.COMPLETED
                values: dict[str, Any] = {"status": row["status"], "deadline": None}
                if completed:
                    values.update(progress=1.0, result=row["result"])
                else:
                    values["errors"] = row["errors"]
                fenced = manager.filter(
                    pk=row["id"], status=Status.RUNNING, owner=name, attempts=row["attempts"]
                )
                if fenced.update(updated=Now(), **values):
                    done.add(row["id"])
            events = {Status.COMPLETED: EventType.COMPLETION, Status.ABORTED: EventType.ABORT}
            History.objects.using(self.db).bulk_create(
                History(task_id=pk, typ=events[Status(status)], worker=name, progress=progress)
                for pk, status, progress in manager.filter(pk__in=done).values_list(
                    "pk", "status", "progress"
                )
            )
        return done

    def refusals(self, worker: Worker | str, leases: Mapping[int, int]) -> dict[int, ScyllaError]:
        """Why `worker` no longer holds these leases (task pk → attempts), one error per pk.

        TaskCancelled for a cancelled task; InvalidTransition for a task this very lease has
        finished already (a write retried after its reply was lost); TaskNotFound for a purged
        one; LeaseLost for everything else (reset, taken over, aborted by the monitor, yielded).
        """
        name = worker_name(worker)
        current = {
            pk: (rn, status, owner, attempts)
            for pk, rn, status, owner, attempts in self.model.objects.using(self.db)
            .filter(pk__in=list(leases))
            .values_list("pk", "rn", "status", "owner", "attempts")
        }
        finished = _finished_by(name, list(current), self.db)
        errors: dict[int, ScyllaError] = {}
        for pk, attempts in leases.items():
            if pk not in current:
                errors[pk] = TaskNotFound(f"Task {pk} no longer exists.")
                continue
            rn, status, owner, now_attempts = current[pk]
            if status == Status.CANCELLED:
                errors[pk] = TaskCancelled(f"Task {rn} was cancelled.", rn=rn, status=status)
            elif owner == name and now_attempts == attempts and pk in finished:
                errors[pk] = InvalidTransition(
                    f"Task {rn} is already {status}.", rn=rn, status=status
                )
            elif status == Status.RUNNING and owner == name and now_attempts == attempts:
                errors[pk] = LeaseLost(
                    f"{name} gave the lease of task {rn} back.", rn=rn, status=status
                )
            else:
                errors[pk] = LeaseLost(
                    f"{name} does not hold the lease of task {rn} "
                    f"(status {status}, owner {owner}, attempt {now_attempts}).",
                    rn=rn,
                    status=status,
                )
        return errors


def _terminal_statuses(statuses: Iterable[str] | None) -> list[str]:
    if statuses is None:
        return sorted(TERMINAL_STATUSES)
    chosen = sorted(set(statuses))
    wrong = [s for s in chosen if s not in {t.value for t in TERMINAL_STATUSES}]
    if wrong or not chosen:
        raise ValidationError(
            f"Only terminal tasks can be purged (completed, aborted, cancelled), not {wrong}.",
            code="invalid_status",
        )
    return chosen


def _error_dict(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {k: [str(m) for e in v for m in e.messages] for k, v in exc.error_dict.items()}
    return {"__all__": list(exc.messages)}


class Task(models.Model):
    """A unit of work: submitted by a client, leased and finished by a worker (SPEC §2)."""

    id = models.BigAutoField(primary_key=True)
    rn = models.CharField(max_length=RN_MAX_LENGTH, unique=True, validators=[rn_validator])
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
    # Null, not "": SPEC §2 has no owner until the first lease, and CHECKs test IS NULL.
    owner = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    deadline = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)

    objects: ClassVar[TaskQuerySet] = TaskQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-created", "-id"]
        permissions = [
            ("submit_task", "Can submit tasks"),
            ("cancel_task", "Can cancel tasks"),
            ("work_task", "Can lease and finish tasks as a worker"),
        ]
        indexes = [
            models.Index(
                fields=["queue", "-priority", "created", "id"],
                name="scylla_task_ready_idx",
                condition=Q(status="ready"),
            ),
            models.Index(
                fields=["deadline"], name="scylla_task_running_idx", condition=Q(status="running")
            ),
            models.Index(
                fields=["updated"],
                name="scylla_task_terminal_idx",
                condition=Q(status__in=["aborted", "cancelled", "completed"]),
            ),
            models.Index(fields=["queue", "status"], name="scylla_task_queue_status_idx"),
            # The admin's owner filter and worker-name search; unleased tasks are not indexed.
            models.Index(
                fields=["owner", "-id"],
                name="scylla_task_owner_idx",
                condition=Q(owner__isnull=False),
            ),
        ]
        constraints = [
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
        ]

    def __str__(self) -> str:
        return f"{self.rn} ({self.queue}, {self.status})"

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        queue: str,
        spec: Any,
        *,
        priority: int | None = None,
        rn: str | None = None,
        not_before: datetime | None = None,
    ) -> Task:
        """A validated, unsaved task. Raises ValidationError naming every bad field."""
        errors: dict[str, ValidationError] = {}

        def check(name: str, validator: Any, value: Any) -> Any:
            try:
                return validator(value)
            except ValidationError as exc:
                errors[name] = exc
                return None

        task = cls(
            rn=check("rn", validate_rn, str(uuid.uuid4()) if rn is None else rn),
            queue=check("queue", validate_queue, queue),
            spec=check("spec", validate_json, spec),
            priority=check(
                "priority",
                validate_priority,
                scylla_settings.DEFAULT_PRIORITY if priority is None else priority,
            ),
            not_before=check("not_before", _validate_not_before, not_before),
        )
        if errors:
            raise ValidationError(errors)
        return task

    @classmethod
    def build_from(cls, item: Mapping[str, Any]) -> Task:
        """`build()` from a mapping, rejecting unknown keys (as a bulk submission item)."""
        if not isinstance(item, Mapping):
            raise ValidationError("Each item must be an object.", code="invalid")
        allowed = {"queue", "spec", "priority", "rn", "not_before"}
        unknown = set(item) - allowed
        if unknown:
            raise ValidationError(
                {key: ValidationError("Unknown field.", code="unknown_field") for key in unknown}
            )
        missing = {"queue", "spec"} - set(item)
        if missing:
            raise ValidationError(
                {
                    key: ValidationError("This field is required.", code="required")
                    for key in missing
                }
            )
        return cls.build(
            item["queue"],
            item["spec"],
            priority=item.get("priority"),
            rn=item.get("rn"),
            not_before=item.get("not_before"),
        )

    # -- transitions ------------------------------------------------------------------------

    def heartbeat(
        self,
        worker: Worker | str,
        *,
        progress: float | None = None,
        timeout: timedelta | float | None = None,
    ) -> None:
        """Extend the lease: `deadline = now + timeout`, and record `progress` if given.

        Only the owner of a running task may heartbeat. Raises TaskCancelled if the task was
        cancelled (stop working on it), LeaseLost if the lease was reset or taken over.
        """
        lease_for = validate_timeout(scylla_settings.LEASE_TIMEOUT if timeout is None else timeout)
        values: dict[str, Any] = {"deadline": _now_plus(lease_for)}
        if progress is not None:
            values["progress"] = validate_progress(progress)
        self._apply(
            Operation.HEARTBEAT, worker, values, refresh=["deadline", "progress"], fence=NOT_YIELDED
        )

    def complete(self, worker: Worker | str, result: Any = None) -> None:
        """running → completed, with progress 1.0 and an optional JSON `result`."""
        values = {
            "status": Status.COMPLETED,
            "progress": 1.0,
            "deadline": None,
            "result": validate_json(result, "result", allow_null=True),
        }
        self._apply(Operation.COMPLETE, worker, values)

    def abort(self, worker: Worker | str, errors: Any) -> None:
        """running → aborted, recording `errors` (at least one `{code, args, description}`).

        Running tasks carry no errors (only an abort writes them, and it ends the task), so the
        errors written are exactly the ones appended.
        """
        values = {"status": Status.ABORTED, "deadline": None, "errors": validate_errors(errors)}
        self._apply(Operation.ABORT, worker, values)

    def yield_lease(self, worker: Worker | str) -> None:
        """Give the task back: `deadline = now - 1 s` and a TaskYield{worker, progress} row.

        The task stays running until the monitor's next pass makes it ready, without writing a
        TaskTimeout. Used by a worker shutting down gracefully.
        """
        self._apply(Operation.YIELD, worker, {"deadline": _now_plus(timedelta(seconds=-1))})

    def cancel(self) -> None:
        """ready/running → cancelled (terminal). A running worker learns on its next write.

        Raises InvalidTransition if the task is already terminal.
        """
        self._apply(Operation.CANCEL, None, {"status": Status.CANCELLED, "deadline": None})

    def _apply(
        self,
        operation: Operation,
        worker: Worker | str | None,
        values: dict[str, Any],
        refresh: Sequence[str] = ("status", "progress", "deadline", "owner", "errors", "result"),
        fence: Q | None = None,
    ) -> None:
        transition = TRANSITIONS[operation]
        name = worker_name(worker) if worker is not None else None
        using = self._state.db or "default"
        fenced = Task.objects.using(using).filter(pk=self.pk, status__in=sources(operation))
        if fence is not None:
            fenced = fenced.filter(fence)
        if transition.owner_only:
            fenced = fenced.filter(owner=name)
        fields = [*refresh, "updated"]
        # The History row names the owner: the worker itself for a worker operation (the fence
        # checked owner = worker), the worker it is taken from for a cancel.
        if db.uses_single_statement_transitions(connections[using]):
            row = db.postgresql_transition(
                fenced, {"updated": Now(), **values}, fields, transition.event
            )
            if row is None:
                raise self._refusal(operation, name, using)
            for field_name, value in row.items():
                setattr(self, field_name, value)
        else:
            with db.write_atomic(using):
                if fenced.update(updated=Now(), **values) != 1:
                    raise self._refusal(operation, name, using)
                self.refresh_from_db(using=using, fields=[*fields, "owner", "progress"])
                if transition.event is not None:
                    History.objects.using(using).create(
                        task=self, typ=transition.event, worker=self.owner, progress=self.progress
                    )
        if transition.target in TERMINAL_STATUSES:
            _later(signals.task_finished, using, task=self, status=self.status)

    def _refusal(self, operation: Operation, worker: str | None, using: str) -> Exception:
        """The specific error for a conditional write that matched no row."""
        current = Task.objects.using(using).filter(pk=self.pk).values("status", "owner").first()
        if current is None:
            return TaskNotFound(f"No task has rn {self.rn!r}.", rn=self.rn)
        status, owner = current["status"], current["owner"]
        if TRANSITIONS[operation].owner_only:
            if status == Status.CANCELLED:
                return TaskCancelled(f"Task {self.rn} was cancelled.", rn=self.rn, status=status)
            finished = status != Status.RUNNING and owner == worker
            if finished and _finished_by(worker, [self.pk], using):
                return InvalidTransition(
                    f"Task {self.rn} is already {status}.", rn=self.rn, status=status
                )
            return LeaseLost(
                f"{worker} does not hold the lease of task {self.rn} "
                f"(status {status}, owner {owner}).",
                rn=self.rn,
                status=status,
            )
        return InvalidTransition(
            f"Cannot {operation} task {self.rn}: it is {status}.", rn=self.rn, status=status
        )

    def delete(self, using: Any = None, keep_parents: bool = False) -> tuple[int, dict[str, int]]:
        """Delete the task and its History."""
        return Task.objects.using(using or self._state.db).filter(pk=self.pk).delete()

    # -- reading ----------------------------------------------------------------------------

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def is_expired(self) -> bool:
        """Running past its deadline (by this host's clock; for display only)."""
        return (
            self.status == Status.RUNNING
            and self.deadline is not None
            and self.deadline < timezone.now()
        )


def _validate_not_before(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError("not_before must be a datetime.", code="invalid_not_before")
    if timezone.is_naive(value):
        raise ValidationError("not_before must be timezone-aware.", code="invalid_not_before")
    return value


class History(models.Model):
    """One event in a task's life: TaskAssignment, TaskTimeout, TaskYield, … (SPEC §4)."""

    id = models.BigAutoField(primary_key=True)
    # DO_NOTHING: tasks are deleted in bulk by TaskQuerySet.delete(), which removes these first.
    task = models.ForeignKey(Task, on_delete=models.DO_NOTHING, related_name="history")
    typ = models.CharField(max_length=32, choices=EventType.choices)
    worker = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    progress = models.FloatField(null=True, blank=True)
    time = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "history"
        indexes = [models.Index(fields=["task", "id"], name="scylla_history_task_idx")]

    def __str__(self) -> str:
        return f"{self.typ} {self.worker or ''}".strip()

    def as_json(self) -> dict[str, Any]:
        """The seed's rendering: `{"_typ", "worker", "progress", "time"}`."""
        entry: dict[str, Any] = {"_typ": self.typ, "worker": self.worker}
        if self.typ in (EventType.TIMEOUT, EventType.YIELD) or self.progress is not None:
            entry["progress"] = self.progress
        entry["time"] = self.time.isoformat() if isinstance(self.time, datetime) else None
        return entry


class WorkerQuerySet(models.QuerySet["Worker"]):
    def register(
        self,
        queues: Sequence[str],
        capacity: int = 1,
        *,
        hostname: str = "",
        pid: int | None = None,
        user: Any = None,
    ) -> Worker:
        """Register a worker process; its name `worker-<id>` comes from the database sequence.

        `user` is who registered it over HTTP: only they (or staff) may act as it there.
        """
        queues = validate_queues(queues)
        if (
            isinstance(capacity, bool)
            or not isinstance(capacity, int)
            or not 1 <= capacity <= 10_000
        ):
            raise ValidationError(
                {"capacity": ValidationError("Capacity must be 1..10000.", code="invalid")}
            )
        return self.create(
            queues=queues, capacity=capacity, hostname=hostname[:255], pid=pid, user=user
        )

    def get_by_name(self, name: str) -> Worker:
        """The worker called `name` (`worker-<id>`), or WorkerNotFound."""
        number = name.removeprefix(WORKER_PREFIX) if isinstance(name, str) else ""
        if not (name.startswith(WORKER_PREFIX) and number.isdigit() and len(number) < 19):
            raise WorkerNotFound(f"{name!r} is not a worker name.")
        try:
            return self.get(pk=int(number))
        except self.model.DoesNotExist:
            raise WorkerNotFound(f"No worker is called {name!r}.") from None

    def alive(self, within: timedelta) -> WorkerQuerySet:
        """Workers not stopped that were seen in the last `within`."""
        return self.filter(stopped__isnull=True, last_seen__gte=_now_plus(-within))


class Worker(models.Model):
    """A worker process. Its name is `worker-<id>`; a restarted process registers anew."""

    id = models.BigAutoField(primary_key=True)
    hostname = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    queues = models.JSONField(default=list)
    capacity = models.PositiveIntegerField(default=1)
    started = models.DateTimeField(db_default=Now(), editable=False)
    last_seen = models.DateTimeField(db_default=Now())
    stopped = models.DateTimeField(null=True, blank=True)
    # Who registered the worker over HTTP; only they may act as it (null for local workers).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    objects: ClassVar[WorkerQuerySet] = WorkerQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        return f"{WORKER_PREFIX}{self.pk}"

    def touch(self) -> None:
        """Record that the worker is alive (`last_seen = now`)."""
        Worker.objects.filter(pk=self.pk).update(last_seen=Now())

    def stop(self) -> None:
        """Record that the worker process has stopped."""
        Worker.objects.filter(pk=self.pk, stopped__isnull=True).update(stopped=Now())
        self.refresh_from_db(fields=["stopped"])


# A yield is the only write that sets a task's deadline before its own `updated` time, so a
# running task with `deadline < updated` has been given back. A heartbeat is fenced on this row
# condition rather than on History: PostgreSQL re-checks a row condition against the version a
# concurrent yield committed, so even a heartbeat already waiting for the row cannot undo a yield.
NOT_YIELDED = Q(deadline__gte=F("updated"))


def _finished_by(worker: str | None, pks: Sequence[int], using: str) -> set[int]:
    """The tasks among `pks` that `worker` itself completed or aborted (not the monitor)."""
    if worker is None or not pks:
        return set()
    return set(
        History.objects.using(using)
        .filter(
            task_id__in=list(pks),
            worker=worker,
            typ__in=[EventType.COMPLETION, EventType.ABORT],
        )
        .values_list("task_id", flat=True)
    )


@dataclass(frozen=True)
class Outcome:
    """How a worker ends one lease, for `TaskQuerySet.finish_many`.

    The lease is the task's pk and its `attempts` when leased. Without `errors` the task is
    completed with `result`; with them it is aborted.
    """

    pk: int
    attempts: int
    result: Any = None
    errors: list[dict[str, Any]] | None = None
