"""Task, History and Worker. The Task methods and the TaskQuerySet set operations are the state
machine of SPEC §3: each transition is one conditional write on the database clock, fenced by
status (and owner, for worker operations), with its History row in the same transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, ClassVar, Literal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connections, models, transaction
from django.db.models import F, Max, Q, Value
from django.dispatch import Signal
from django.utils import timezone

from . import db, retries, signals
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
#: The `not_before` of a follow-up task whose parents have not all completed: never leasable.
HELD = datetime(9999, 12, 31, tzinfo=UTC)
#: Most parents a follow-up task may wait for.
MAX_PARENTS = 10_000


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
        retry: retries.Retry | Mapping[str, Any] | None = None,
        after: Sequence[str] | None = None,
    ) -> Task:
        """Submit a new `ready` task. Raises ValidationError, or DuplicateTask if `rn` exists.

        `retry` is the task's retry policy (it overrides its handler's). With `after` (rns of
        existing tasks; TaskNotFound if one is unknown) the task is a follow-up: held until
        every one of them has completed, then leasable from `not_before`.
        """
        task = self.model.build(
            queue, spec, priority=priority, rn=rn, not_before=not_before, retry=retry
        )
        if after is not None:
            return self._submit_after(task, after)
        try:
            with transaction.atomic(using=self.db):
                task.save(force_insert=True, using=self.db)
        except IntegrityError as exc:
            if self.filter(rn=task.rn).exists():
                raise DuplicateTask(f"A task with rn {task.rn!r} exists.", rn=task.rn) from exc
            raise
        _later(signals.task_submitted, self.db, task=task)
        return task

    def _submit_after(self, task: Task, after: Sequence[str]) -> Task:
        """Insert `task` held until the tasks named by `after` have completed (a follow-up)."""
        parents = _validate_after(after)
        release_at, task.not_before = task.not_before, HELD
        with db.write_atomic(self.db):
            found: dict[str, int] = {}
            for start in range(0, len(parents), 500):
                chunk = parents[start : start + 500]
                found.update(
                    self.model.objects.using(self.db).filter(rn__in=chunk).values_list("rn", "pk")
                )
            missing = [rn for rn in parents if rn not in found]
            if missing:
                raise TaskNotFound(
                    f"after: no task has rn {missing[0]!r} ({len(missing)} unknown).",
                    rn=missing[0],
                )
            try:
                with transaction.atomic(using=self.db):
                    task.save(force_insert=True, using=self.db)
            except IntegrityError as exc:
                if self.filter(rn=task.rn).exists():
                    raise DuplicateTask(f"A task with rn {task.rn!r} exists.", rn=task.rn) from exc
                raise
            Dependency.objects.using(self.db).bulk_create(
                (
                    Dependency(child=task, parent_id=found[rn], parent_rn=rn, release_at=release_at)
                    for rn in parents
                ),
                batch_size=1000,
            )
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
                _retry_exhausted(manager, exhausted)
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
    # Retry chains (scylla_django.retries): a retry is a new task, linked by rn to the task it
    # follows and to the first task of its chain (null on that first task itself).
    retry_of = models.CharField(max_length=RN_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    root = models.CharField(max_length=RN_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    attempt = models.PositiveIntegerField(default=1)
    retry_policy = models.JSONField(null=True, blank=True)

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
            models.Index(
                fields=["root", "attempt"],
                name="scylla_task_root_idx",
                condition=Q(root__isnull=False),
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
        *,
        priority: int | None = None,
        rn: str | None = None,
        not_before: datetime | None = None,
        retry: retries.Retry | Mapping[str, Any] | None = None,
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
            retry_policy=check("retry", _validate_retry, retry),
        )
        if errors:
            raise ValidationError(errors)
        return task

    @classmethod
    def build_from(cls, item: Mapping[str, Any]) -> Task:
        """`build()` from a mapping, rejecting unknown keys (as a bulk submission item)."""
        if not isinstance(item, Mapping):
            raise ValidationError("Each item must be an object.", code="invalid")
        allowed = {"queue", "spec", "priority", "rn", "not_before", "retry"}
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
            retry=item.get("retry"),
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
        self._apply(Operation.HEARTBEAT, worker, values, refresh=["deadline", "progress"])

    def complete(self, worker: Worker | str, result: Any = None) -> None:
        """running → completed, with progress 1.0 and an optional JSON `result`."""
        values = {
            "status": Status.COMPLETED,
            "progress": 1.0,
            "deadline": None,
            "result": validate_json(result, "result", allow_null=True),
        }
        self._apply(Operation.COMPLETE, worker, values)

    def abort(self, worker: Worker | str, errors: Any, *, retry: bool | None = None) -> Task | None:
        """running → aborted, recording `errors` (at least one `{code, args, description}`).

        Running tasks carry no errors (only an abort writes them, and it ends the task), so the
        errors written are exactly the ones appended.

        With a retry policy (the task's own, else its handler's) that covers the errors, or with
        `retry=True`, a successor task is submitted in the same transaction as the abort and
        returned (see `scylla_django.retries`); `retry=False` never retries. Returns None when
        no successor was submitted.
        """
        cleaned = validate_errors(errors)
        values = {"status": Status.ABORTED, "deadline": None, "errors": cleaned}
        policy = self._retry_decision(cleaned, retry)
        if policy is None:
            self._apply(Operation.ABORT, worker, values)
            return None
        using = self._state.db or "default"
        with db.write_atomic(using):
            self._apply(Operation.ABORT, worker, values)
            return self._submit_retry(policy, using)

    def retry(self) -> Task:
        """Resubmit this aborted or cancelled task by hand, as the next attempt of its chain.

        The new task is ready at once (no backoff) and linked like an automatic retry. Raises
        InvalidTransition unless the task is aborted or cancelled, DuplicateTask if it was
        already followed by a retry.
        """
        using = self._state.db or "default"
        manager = Task.objects.using(using)
        with db.write_atomic(using):
            status = manager.filter(pk=self.pk).values_list("status", flat=True).first()
            if status is None:
                raise TaskNotFound(f"No task has rn {self.rn!r}.", rn=self.rn)
            if status not in (Status.ABORTED, Status.CANCELLED):
                raise InvalidTransition(
                    f"Only an aborted or cancelled task can be retried; {self.rn} is {status}.",
                    rn=self.rn,
                    status=status,
                )
            existing = manager.filter(retry_of=self.rn).values_list("rn", flat=True).first()
            if existing is not None:
                raise DuplicateTask(
                    f"Task {self.rn} was already retried as {existing}.", rn=existing
                )
            successor = self._submit_retry(None, using)
            if successor is None:
                rn = retries.successor_rn(self.root or self.rn, self.attempt + 1)
                raise DuplicateTask(f"A task with rn {rn!r} exists.", rn=rn)
            return successor

    def _retry_decision(
        self, errors: Sequence[Mapping[str, Any]], retry: bool | None
    ) -> retries.Retry | None:
        """The policy under which this abort is followed by a retry, or None."""
        if retry is False:
            return None
        policy = retries.policy_for(self.queue, self.retry_policy)
        if retry is True:
            policy = policy or retries.Retry()
        elif policy is None or not policy.covers(errors):
            return None
        return policy if policy.allows(self.attempt) else None

    def _submit_retry(self, policy: retries.Retry | None, using: str) -> Task | None:
        """Insert the next attempt of this task's chain; return it (None if its rn is taken).

        Called in the transaction that aborted the task, so `updated` is the abort time on the
        database clock; the retry waits the policy's backoff from then (no wait without one).
        Follow-ups waiting for this task wait for the retry instead.
        """
        root = self.root or self.rn
        attempt = self.attempt + 1
        not_before = None if policy is None else self.updated + policy.delay(self.attempt)
        successor = Task(
            rn=retries.successor_rn(root, attempt),
            queue=self.queue,
            spec=self.spec,
            priority=self.priority,
            not_before=not_before,
            retry_of=self.rn,
            root=root,
            attempt=attempt,
            retry_policy=self.retry_policy,
        )
        manager = Task.objects.using(using)
        # The unique rn (and one retry per task) make a second successor impossible.
        manager.bulk_create([successor], ignore_conflicts=True)
        created = manager.filter(rn=successor.rn, retry_of=self.rn).first()
        if created is None:
            return None
        Dependency.objects.using(using).filter(parent_id=self.pk).update(
            parent_id=created.pk, parent_rn=created.rn
        )
        _later(signals.task_submitted, using, task=created)
        return created

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
    ) -> None:
        transition = TRANSITIONS[operation]
        name = worker_name(worker) if worker is not None else None
        using = self._state.db or "default"
        fenced = Task.objects.using(using).filter(pk=self.pk, status__in=sources(operation))
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
            if status != Status.RUNNING and owner == worker:
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


def _validate_after(after: object) -> list[str]:
    if isinstance(after, str) or not isinstance(after, Sequence):
        raise ValidationError(
            {"after": ValidationError("after is a list of task rns.", code="invalid_after")}
        )
    parents = list(dict.fromkeys(after))
    if not 1 <= len(parents) <= MAX_PARENTS:
        raise ValidationError(
            {
                "after": ValidationError(
                    f"after names 1..{MAX_PARENTS} tasks, not {len(parents)}.",
                    code="invalid_after",
                )
            }
        )
    for rn in parents:
        try:
            validate_rn(rn)
        except ValidationError as exc:
            raise ValidationError({"after": exc}) from None
    return parents


def _retry_exhausted(manager: TaskQuerySet, ids: set[int]) -> None:
    """Follow tasks aborted for `max_attempts_exceeded` by a retry where a policy covers it."""
    candidates = manager.filter(pk__in=ids, status=Status.ABORTED).filter(
        Q(retry_policy__isnull=False) | Q(queue__in=retries.policy_queues())
    )
    for task in candidates:
        policy = retries.policy_for(task.queue, task.retry_policy)
        if policy is not None and policy.covers(task.errors) and policy.allows(task.attempt):
            task._submit_retry(policy, manager.db)


def _validate_retry(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, retries.Retry):
        return value.as_json()
    if not isinstance(value, Mapping):
        raise ValidationError(
            "retry must be a Retry(...) or its JSON object.", code="invalid_retry"
        )
    return retries.Retry.from_json(value).as_json()


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


class Dependency(models.Model):
    """A follow-up task (`child`) waits for `parent` to complete (`submit(..., after=[...])`).

    The child is held by `not_before = HELD` until every parent has completed; the monitor then
    releases it (`scylla_django.followups`). Rows are deleted once the child is released or
    cancelled. Neither key is a database constraint, so purging tasks never cascades here.
    """

    id = models.BigAutoField(primary_key=True)
    child = models.ForeignKey(
        Task, on_delete=models.DO_NOTHING, db_constraint=False, related_name="dependencies"
    )
    parent = models.ForeignKey(
        Task, on_delete=models.DO_NOTHING, db_constraint=False, related_name="dependents"
    )
    # The parent's rn, to name it in an error even after it was purged.
    parent_rn = models.CharField(max_length=RN_MAX_LENGTH)
    # The child's own `not_before`, set when it is released.
    release_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["parent"], name="scylla_dependency_parent_idx")]
        constraints = [
            models.UniqueConstraint(fields=["child", "parent"], name="scylla_dependency_unique")
        ]

    def __str__(self) -> str:
        return f"{self.child_id} after {self.parent_rn}"


class CatchUp(models.TextChoices):
    """What a schedule submits for the ticks it missed while no monitor ran."""

    ONE = "one", "The latest missed tick only"
    ALL = "all", "Every missed tick"
    NONE = "none", "No missed tick"


class Schedule(models.Model):
    """A recurring submission: a task every `cron` tick (in `timezone`) or every `every`.

    Each tick's task has the rn `schedule:<name>:<tick in UTC>`, so any number of monitors
    submit it exactly once. Schedules come from `SCYLLA["SCHEDULES"]` (`from_settings`) or are
    created in the admin or over the API. See `scylla_django.schedules`.
    """

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=100, unique=True, validators=[queue_validator])
    cron = models.CharField(max_length=200, blank=True)
    every = models.DurationField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH, validators=[queue_validator])
    spec = models.JSONField(default=dict, blank=True)
    priority = models.PositiveSmallIntegerField(default=0)
    enabled = models.BooleanField(default=True)
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.ONE)
    skip_if_running = models.BooleanField(default=False)
    from_settings = models.BooleanField(default=False, editable=False)
    next_run = models.DateTimeField(null=True, blank=True, editable=False)
    last_run = models.DateTimeField(null=True, blank=True, editable=False)
    last_task = models.CharField(  # noqa: DJ001
        max_length=RN_MAX_LENGTH, null=True, blank=True, editable=False
    )
    created = models.DateTimeField(db_default=Now(), editable=False)
    updated = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        ordering = ["name"]
        indexes = [
            models.Index(
                fields=["next_run"], name="scylla_schedule_due_idx", condition=Q(enabled=True)
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=(Q(every__isnull=True) & ~Q(cron=""))
                | (Q(every__isnull=False) & Q(cron="")),
                name="scylla_schedule_cron_or_every",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=0, priority__lte=255),
                name="scylla_schedule_priority_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name
