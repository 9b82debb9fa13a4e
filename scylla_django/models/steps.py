"""Durable execution, what a task's runs leave for the next run: `Step` (a step's recorded
result, and the task's cursor), `Wait` (a sleep or a wait for an event or a signal) and
`TaskSignal` (a signal sent to a task). See `scylla_django.durable`.

These are side tables, never read by the lease or by the transitions of tasks that use none
of them: a parked task is an ordinary ready task whose `not_before` is its wait's timeout.
Their keys to the task are no database constraint (purging tasks deletes them in the same
transaction, `TaskQuerySet.delete`).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Protocol

from django.core.exceptions import ValidationError
from django.db import models

from .. import db
from ..db import Now
from ..validation import validate_json

if TYPE_CHECKING:
    from django.db.models.base import ModelState

    from .processes import Worker

#: The longest name of a step, a wait or a signal.
NAME_MAX_LENGTH = 100
#: The name of a task's cursor among its steps (a step's own name cannot start with "@").
CURSOR = "@cursor"
#: What a step's, a wait's or a signal's name is made of (the API's schema says it too).
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:/#-]*$"
_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.:/#-]*\Z")


class LeasedTask(Protocol):
    """What the durable records need of a task: its key, its name, its database and the
    lock of its lease (`Task` is one; this module stands below `task.py` and names no model
    above it)."""

    pk: Any
    rn: str
    _state: ModelState

    def lock_lease(self, worker: Worker | str, *, lease: int | None = None) -> None: ...

    def park(self, worker: Worker | str, until: Any, *, lease: int | None = None) -> None: ...


class Step(models.Model):
    """A step of a task that completed: its name, its JSON result (and that result's size),
    when, and under which lease number. Written in the fenced transaction that commits the
    step's own writes, so a step is recorded exactly when its writes are; unique per task.
    The task's cursor (`ctx.checkpoint()`) is the step named `CURSOR`, rewritten in place."""

    id = models.BigAutoField(primary_key=True)
    task = models.ForeignKey(
        "Task", on_delete=models.DO_NOTHING, db_constraint=False, related_name="steps"
    )
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    result = models.JSONField(null=True, blank=True)
    size = models.PositiveIntegerField(default=0)
    lease = models.PositiveIntegerField()
    time = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["task", "name"], name="scylla_step_once_per_task")
        ]

    def __str__(self) -> str:
        return f"{self.task_id}:{self.name}"


def validate_name(value: object, what: str = "step") -> str:
    """A step's, a wait's or a signal's name: letters, digits and `_ . : / # -`, not starting
    with one of `. : / # -`, at most NAME_MAX_LENGTH characters (ValidationError
    `invalid_name`)."""
    if not isinstance(value, str) or not _NAME.match(value) or len(value) > NAME_MAX_LENGTH:
        raise ValidationError(
            f"A {what} name is letters, digits and _ . : / # - (at most {NAME_MAX_LENGTH}), "
            f"such as download or charge:card, not {value!r}.",
            code="invalid_name",
        )
    return value


def json_size(value: Any) -> int:
    """The size in bytes of `value` as compact JSON (a step's result as stored)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def validate_step_result(name: str, value: Any) -> Any:
    """A step's result: JSON within the result size limit (`SPEC_SIZE_LIMIT`), or None."""
    return validate_json(value, f"the result of step {name!r}", allow_null=True)


def recorded(task: LeasedTask) -> dict[str, Step]:
    """The steps `task` completed so far, its cursor among them, by name (one query)."""
    using = task._state.db or "default"
    return {step.name: step for step in Step.objects.using(using).filter(task_id=task.pk)}


def record_step(task: LeasedTask, lease: int, name: str, result: Any) -> Step:
    """Record the step `name` of `task` with `result`, inside the caller's transaction, which
    holds the task's lease locked (`Task.lock_lease`): the step commits with the writes of
    that transaction, or not at all. ValidationError for a bad name or result."""
    validate_name(name)
    value = validate_step_result(name, result)
    using = task._state.db or "default"
    step = Step(task_id=task.pk, name=name, result=value, size=json_size(value), lease=lease)
    step.time = Now()
    step.save(using=using, force_insert=True)
    return step


def save_cursor(task: LeasedTask, worker: Worker | str, lease: int, cursor: Any) -> Step:
    """Write `task`'s cursor (`ctx.checkpoint(cursor, now=True)`), fenced on `worker`'s lease
    `lease`: one transaction that locks the task's row on the lease and rewrites the cursor
    in place. ValidationError for a cursor that is not JSON within the size limit; LeaseLost
    or TaskCancelled (nothing written) when the lease is not held."""
    value = validate_cursor(cursor)
    using = task._state.db or "default"
    with db.write_atomic(using):
        task.lock_lease(worker, lease=lease)
        write_cursor(using, task.pk, lease, value)
        step = Step.objects.using(using).get(task_id=task.pk, name=CURSOR)
    return step


def validate_cursor(cursor: Any) -> Any:
    """A cursor: JSON within the result size limit, or None (ValidationError)."""
    return validate_json(cursor, "the cursor", allow_null=True)


def write_cursor(using: str, task_id: int, lease: int, value: Any) -> None:
    """Rewrite the cursor of the task `task_id` in place (or write its first), inside the
    caller's transaction, which holds the task's lease locked."""
    size = json_size(value)
    steps = Step.objects.using(using).filter(task_id=task_id, name=CURSOR)
    if not steps.update(result=value, size=size, lease=lease, time=Now()):
        Step.objects.using(using).create(
            task_id=task_id, name=CURSOR, result=value, size=size, lease=lease, time=Now()
        )


def cursor_row(task_id: int, value: Any) -> tuple[int, str, int]:
    """A checkpoint as the heartbeat statement sends it (`db.Cursors`): the task's pk, the
    cursor as JSON text, its size."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return task_id, text, len(text.encode())
