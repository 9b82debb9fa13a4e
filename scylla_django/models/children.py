"""Children: tasks a running task spawns (`ctx.spawn`), linked to it by `parent`, submitted in
the transaction that completes it, and snoozes, the other way a worker's outcome is written.

A child names its parent's rn in `parent`; the parent's children are the tasks that name it.
A handler may also open a batch (`ctx.batch()`): its tasks are children too, and the batch,
its callbacks and its tasks are written with the parent's completion as a child is.
Spawned children wait in the worker with the outcome of their parent and are inserted in the
same transaction as its completion, so a parent that aborts (or whose completion is refused:
its lease was lost) never leaves children behind.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from ..exceptions import DuplicateTask, ScyllaError
from . import submission
from .batches import Batch
from .dependencies import AFTER_PARENTS
from .inputs import ITEM_FIELDS, new_rn, task_values
from .outcomes import Outcome

logger = logging.getLogger("scylla_django")


def submit_children(tasks: QuerySet[Any], outcomes: Sequence[Outcome], done: set[int]) -> None:
    """Submit the children of the outcomes in `outcomes` whose tasks completed (`done`: the
    pks written; call it in the transaction that wrote them). A child whose rn exists is
    skipped, as a submission of an existing rn is (submission is idempotent per rn)."""
    for outcome in outcomes:
        if outcome.pk not in done or outcome.errors is not None:
            continue
        spawn(tasks, outcome.children)


def spawn(tasks: QuerySet[Any], children: Sequence[Mapping[str, Any]]) -> None:
    """Submit `children` (each `{queue, spec, **options}` naming its parent, or a batch that
    `ctx.batch()` opened) in the caller's transaction. A child whose rn exists is skipped."""
    for child in children:
        if "batch" in child:
            submit_batch(tasks, child["batch"])
            continue
        options = dict(child)
        queue, spec = options.pop("queue"), options.pop("spec")
        try:
            submission.submit(tasks, queue, spec, **options)
        except DuplicateTask:
            logger.info("child %s of task %s exists already", child.get("rn"), child["parent"])


#: Most children one completion over HTTP may submit.
MAX_SPAWNED = 1000

#: The options a child given with a completion may take: a submission's, but its parent and batch.
CHILD_OPTIONS = ITEM_FIELDS - {"queue", "spec", "batch", "parent"}


def validate_children(children: object, parent: str) -> list[dict[str, Any]]:
    """The children a completion submits (`Task.complete(children=[...])`): a list of at most
    MAX_SPAWNED `{queue, spec, **options}`, each validated as a submission and named the
    child of `parent`. ValidationError `{"children": ...}` (code `invalid_children`, or the
    bad field's code) otherwise, before anything is written."""

    def refuse(message: str, code: str = "invalid_children") -> ValidationError:
        return ValidationError({"children": ValidationError(message, code=code)})

    if isinstance(children, str | bytes | Mapping) or not isinstance(children, Sequence):
        raise refuse("children is a list of tasks to submit.")
    if len(children) > MAX_SPAWNED:
        raise refuse(f"At most {MAX_SPAWNED} children, not {len(children)}.")
    found: list[dict[str, Any]] = []
    for index, child in enumerate(children):
        if not isinstance(child, Mapping) or "queue" not in child or "spec" not in child:
            raise refuse(f"Child {index} is not an object with a queue and a spec.")
        unknown = set(child) - CHILD_OPTIONS - {"queue", "spec"}
        if unknown:
            raise refuse(f"Child {index} takes no {', '.join(sorted(unknown))}.", "unknown_field")
        options = {k: v for k, v in child.items() if k not in ("queue", "spec")}
        options["rn"] = options.get("rn") or new_rn()
        options["parent"] = parent
        conflict = options.pop("on_conflict", None)
        try:
            task_values(child["queue"], child["spec"], **options)
        except ValidationError as exc:
            detail = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            code = next(iter(e.code for v in exc.error_dict.values() for e in v), None)
            raise refuse(f"Child {index}: {detail}", code or "invalid_children") from None
        if conflict is not None:
            options["on_conflict"] = conflict
        found.append({"queue": child["queue"], "spec": child["spec"], **options})
    return found


def submit_batch(tasks: QuerySet[Any], batch: Mapping[str, Any]) -> Batch:
    """Write a batch a handler opened (`ctx.batch()`): its held callbacks (`{kind: {queue,
    spec, options}}`), its row and its tasks (`tasks`, each a `submit_many` item), in the
    caller's transaction; the tasks already name their parent. An item whose rn exists is
    left out of the batch, as by `Batch.submit_many`."""
    held = {
        f"{kind}_id": submission.submit(
            tasks,
            callback["queue"],
            callback["spec"],
            not_before=AFTER_PARENTS,
            **callback["options"],
        ).pk
        for kind, callback in batch["callbacks"].items()
    }
    row = Batch.objects.using(tasks.db).create(**held)
    items = [{**item, "batch": row.pk} for item in batch["tasks"]]
    outcomes = submission.submit_many(tasks, items) if items else []
    row.total = sum(1 for outcome in outcomes if outcome.outcome == "inserted")
    Batch.objects.using(tasks.db).filter(pk=row.pk).update(total=row.total)
    return row


def snooze_outcomes(tasks: QuerySet[Any], name: str, outcomes: Sequence[Outcome]) -> set[int]:
    """Snooze the tasks of `outcomes` (each has a `snooze` delay) for the worker `name`, each
    in its own fenced write (`Task.snooze`); return the pks written (snoozed, or aborted for
    `too_many_snoozes`). A refused lease is left out, as by `finish_many`."""
    written: set[int] = set()
    manager = tasks.model.objects.using(tasks.db)
    for outcome in outcomes:
        task: Any = outcome.task
        if task is None:
            task = manager.filter(pk=outcome.pk).first()
        if task is None:
            continue
        try:
            task.snooze(name, outcome.snooze, lease=outcome.lease)
        except ScyllaError:
            continue
        written.add(outcome.pk)
    return written
