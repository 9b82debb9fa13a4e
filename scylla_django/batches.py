"""Batches: tasks submitted together, and callbacks that run once when the batch is done.

    with Batch(on_success=("reports", {"month": 7})) as batch:
        for image in images:
            batch.submit("resize", {"image": image})

The block is one transaction: the batch row (`models.Batch`), its callbacks and its tasks are
all written, or none is. Each callback is a task submitted with the batch and held (`not_before =
AFTER_PARENTS`, as a follow-up is) until the monitor's `release_callbacks` releases it (its
condition holds) or cancels it (it can no longer hold), in a conditional write on the callback task
that succeeds once, however many monitors run. Whether a condition holds is read from the batch's
counters, which the finishing transaction of each task moves (`models.batches.count_finished`):
never from a scan of the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Unpack

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from . import db, signals
from .db import Now
from .enums import EventType, Status
from .exceptions import InvalidTransition
from .models import (
    AFTER_PARENTS,
    CALLBACKS,
    History,
    SubmitOutcome,
    Task,
    TaskOptions,
    send_on_commit,
)
from .models import Batch as BatchRow
from .models.inputs import task_values
from .models.serving import unserved_queues

logger = logging.getLogger("scylla_django")

#: Batches looked at per pass of `release_callbacks`.
RELEASE_LIMIT = 1000


@dataclass(frozen=True)
class Callback:
    """A batch's callback as given: the task to submit, held until its condition holds."""

    queue: str
    spec: Any
    options: Mapping[str, Any]


def validate_callback(kind: str, value: object, using: str = "default") -> Callback | None:
    """The callback `kind` (`on_success`, ...) given as `(queue, spec)` or `(queue, spec,
    {options})`, or a mapping `{"queue", "spec", "priority", ...}`; None for None.

    Raises ValidationError `{kind: ...}`: `invalid_callback` for another shape or a bad field,
    `unknown_queue` for a queue that no handler in this process and no live worker serves (a
    callback that nothing would ever run).
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        options = dict(value)
        queue, spec = options.pop("queue", None), options.pop("spec", None)
    elif isinstance(value, Sequence) and not isinstance(value, str) and len(value) in (2, 3):
        queue, spec = value[0], value[1]
        options = dict(value[2]) if len(value) == 3 and isinstance(value[2], Mapping) else {}
        if len(value) == 3 and not isinstance(value[2], Mapping):
            raise _callback_error(kind, "The options of a callback are a mapping.")
    else:
        raise _callback_error(kind, "A callback is (queue, spec) or (queue, spec, {options}).")
    unknown = set(options) - {"priority", "rn", "retry"}
    if unknown:
        raise _callback_error(kind, f"A callback takes no {', '.join(sorted(unknown))}.")
    try:
        task_values(queue, spec, **options)
    except ValidationError as exc:
        raise _callback_error(kind, "; ".join(exc.messages)) from None
    if unserved_queues([queue], using):
        raise ValidationError(
            {
                kind: ValidationError(
                    f"No handler and no live worker serves queue {queue!r}: the callback "
                    "would never run.",
                    code="unknown_queue",
                )
            }
        )
    return Callback(queue, spec, options)


def _callback_error(kind: str, message: str) -> ValidationError:
    return ValidationError({kind: ValidationError(message, code="invalid_callback")})


class Batch(AbstractContextManager["Batch"]):
    """Submit tasks as one batch, with callbacks (each `(queue, spec)`, see
    `validate_callback`): `on_success` runs once every task completed, `on_complete` once every
    task finished (completed, or failed for good), `on_failure` after the first task that
    failed for good (aborted with no retry left, or cancelled).

    Used as a context manager, the block is one transaction: leaving it by an exception writes
    nothing. `row` is the batch (`models.Batch`) once the block has begun. Bad callbacks raise
    ValidationError when the Batch is made, before anything is written.
    """

    def __init__(
        self,
        *,
        on_success: object = None,
        on_complete: object = None,
        on_failure: object = None,
        using: str = "default",
    ) -> None:
        given = {"on_success": on_success, "on_complete": on_complete, "on_failure": on_failure}
        errors: dict[str, list[ValidationError]] = {}
        self.callbacks: dict[str, Callback] = {}
        for kind, value in given.items():
            try:
                callback = validate_callback(kind, value, using)
            except ValidationError as exc:
                errors.update(exc.error_dict)
                continue
            if callback is not None:
                self.callbacks[kind] = callback
        if errors:
            raise ValidationError(errors)
        self.using = using
        self.row: BatchRow | None = None
        self.submitted = 0
        self._atomic: Any = None

    def __enter__(self) -> Batch:
        self._atomic = db.write_atomic(self.using)
        self._atomic.__enter__()
        try:
            self.row = open_batch(self.callbacks, self.using)
        except BaseException as exc:
            self._atomic.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        try:
            if exc_type is None and self.row is not None:
                BatchRow.objects.using(self.using).filter(pk=self.row.pk).update(
                    total=self.submitted
                )
                self.row.total = self.submitted
        except BaseException as error:
            self._atomic.__exit__(type(error), error, error.__traceback__)
            raise
        return bool(self._atomic.__exit__(exc_type, exc, traceback))

    def _open_row(self) -> BatchRow:
        if self.row is None:
            raise RuntimeError("Submit in the batch's `with` block.")
        return self.row

    def submit(self, queue: str, spec: Any, **options: Unpack[TaskOptions]) -> Task:
        """Submit a task in the batch (as `Task.objects.submit`, without `after`)."""
        row = self._open_row()
        options["batch"] = row.pk
        task = Task.objects.using(self.using).submit(queue, spec, **options)
        if task.submit_outcome == "inserted":
            self.submitted += 1
        return task

    def submit_many(self, items: Iterable[Mapping[str, Any]]) -> list[SubmitOutcome]:
        """Submit several tasks in the batch (as `Task.objects.submit_many`): one outcome per
        item; the invalid items and duplicates are not in the batch."""
        row = self._open_row()
        outcomes = Task.objects.using(self.using).submit_many(
            {**item, "batch": row.pk} if isinstance(item, Mapping) else item for item in items
        )
        self.submitted += sum(1 for outcome in outcomes if outcome.outcome == "inserted")
        return outcomes


def open_batch(callbacks: Mapping[str, Callback], using: str) -> BatchRow:
    """Write a new batch and its held callback tasks (in the caller's transaction)."""
    tasks = Task.objects.using(using)
    held = {
        f"{kind}_id": tasks.submit(
            callback.queue, callback.spec, not_before=AFTER_PARENTS, **callback.options
        ).pk
        for kind, callback in callbacks.items()
    }
    row: BatchRow = BatchRow.objects.using(using).create(**held)
    row.refresh_from_db(using=using, fields=["created"])
    return row


def cancel_batch(row: BatchRow) -> int:
    """Cancel the batch: its ready and running tasks, and its callbacks not yet released
    (with the code `batch_cancelled`). Returns how many tasks of the batch were cancelled.

    Raises InvalidTransition if the batch was already cancelled; nothing is written then.
    """
    using = row._state.db or "default"
    with db.write_atomic(using):
        batches = BatchRow.objects.using(using)
        if not batches.filter(pk=row.pk, cancelled__isnull=True).update(cancelled=Now()):
            raise InvalidTransition(f"Batch {row.pk} is already cancelled.", status="cancelled")
        for pk in row.callbacks().values():
            _cancel_callback(pk, "batch_cancelled", f"Batch {row.pk} was cancelled.", using)
        cancelled = Task.objects.using(using).filter(batch_id=row.pk).cancel()
        batches.filter(pk=row.pk, closed__isnull=True).update(closed=Now())
    row.refresh_from_db(using=using)
    return cancelled


@dataclass(frozen=True)
class CallbackPass:
    """What one pass of `release_callbacks` did: callbacks `released` and `cancelled`."""

    released: int
    cancelled: int


def decide(row: BatchRow) -> dict[str, str | None]:
    """What becomes of each callback kind of the batch now: "release", "cancel", or None
    (wait)."""
    if row.cancelled is not None:
        return dict.fromkeys(CALLBACKS, "cancel")
    finished = row.finished
    success = "release" if finished and row.completed >= row.total else None
    if finished and success is None:
        success = "cancel"
    failure = "release" if row.failed > 0 else ("cancel" if finished else None)
    return {
        "on_success": success,
        "on_complete": "release" if finished else None,
        "on_failure": failure,
    }


_CANCEL_REASONS = {
    "on_success": ("batch_failed", "A task of batch {pk} failed; on_success will not run."),
    "on_complete": ("batch_cancelled", "Batch {pk} was cancelled."),
    "on_failure": (
        "batch_succeeded",
        "Every task of batch {pk} completed; on_failure will not run.",
    ),
}


def release_callbacks(using: str = "default", *, limit: int = RELEASE_LIMIT) -> CallbackPass:
    """Release the callbacks whose condition holds, and cancel those whose condition can no
    longer hold, of the open batches that are due (read from their counters); close the
    batches whose callbacks are all resolved. Safe under any number of concurrent callers:
    each callback is released or cancelled by one conditional write."""
    released = cancelled = 0
    batches = BatchRow.objects.using(using)
    for row in batches.due().order_by("pk")[:limit]:
        decisions = decide(row)
        for kind, pk in row.callbacks().items():
            action = decisions[kind]
            if action == "release":
                released += _release_callback(pk, using)
            elif action == "cancel":
                code, text = _CANCEL_REASONS[kind]
                if row.cancelled is not None:
                    code, text = _CANCEL_REASONS["on_complete"]
                cancelled += _cancel_callback(pk, code, text.format(pk=row.pk), using)
        if row.finished or row.cancelled is not None:
            batches.filter(pk=row.pk, closed__isnull=True).update(closed=Now())
    if released or cancelled:
        logger.info("batches: released %d callbacks, cancelled %d", released, cancelled)
    return CallbackPass(released=released, cancelled=cancelled)


def _release_callback(pk: int, using: str) -> int:
    """Release one held callback task (1), unless it was released or cancelled already (0)."""
    tasks = Task.objects.using(using)
    with db.write_atomic(using):
        done = tasks.filter(pk=pk, status=Status.READY, not_before=AFTER_PARENTS).update(
            not_before=None, updated=Now()
        )
        if done:
            queue = tasks.filter(pk=pk).values_list("queue", flat=True).first()
            if queue is not None:
                db.notify_ready(using, [queue])
    if done and signals.task_submitted.has_listeners(Task):
        task = tasks.filter(pk=pk).first()
        if task is not None:
            send_on_commit(signals.task_submitted, using, task=task)
    return done


def _cancel_callback(pk: int, code: str, description: str, using: str) -> int:
    """Cancel one held callback task with the error `code` (1), unless it was released or
    cancelled already (0); with its TaskCancellation row."""
    tasks = Task.objects.using(using)
    error = {"code": code, "args": {}, "description": description}
    with transaction.atomic(using=using):
        done = tasks.filter(pk=pk, status=Status.READY, not_before=AFTER_PARENTS).update(
            status=Status.CANCELLED, not_before=None, errors=[error], updated=Now()
        )
        if done:
            History.objects.using(using).create(task_id=pk, typ=EventType.CANCELLATION)
    return done


def batch_of(task: Task) -> BatchRow | None:
    """The batch `task` belongs to, or else the batch it is a callback of; None if neither."""
    using = task._state.db or "default"
    batches = BatchRow.objects.using(using)
    if task.batch_id is not None:
        return batches.filter(pk=task.batch_id).first()
    return batches.filter(
        Q(on_success=task.pk) | Q(on_complete=task.pk) | Q(on_failure=task.pk)
    ).first()
