"""Submission: new tasks inserted one at a time (`submit`, with or without parents) or in bulk
(`submit_many`), each followed by `task_submitted` once committed.

`TaskQuerySet.submit` and `submit_many` are these functions; the arguments and the validation of
a submission are in `inputs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Unpack

from django.db import IntegrityError, connections, transaction

from .. import db, signals
from ..db import inserts
from ..exceptions import DuplicateTask, TaskNotFound
from .dependencies import HELD, Dependency
from .inputs import BulkSubmission, SubmitOutcome, TaskOptions, task_values, validate_after
from .notices import send_on_commit

if TYPE_CHECKING:
    from .task import Task, TaskQuerySet

#: Parents looked up per query, and tasks validated and inserted per chunk (off PostgreSQL).
CHUNK = 500


def submit(
    tasks: TaskQuerySet,
    queue: str,
    spec: Any,
    *,
    after: Sequence[str] | None = None,
    **options: Unpack[TaskOptions],
) -> Task:
    """Submit a new `ready` task to the database of `tasks`: see `TaskQuerySet.submit`."""
    values = task_values(queue, spec, **options)
    if after is not None:
        return submit_after(tasks, tasks.model(**values), after)
    if db.uses_single_statement_transitions(connections[tasks.db]):
        inserted = inserts.postgresql_submit(tasks, values)
        if inserted is None:
            raise DuplicateTask(f"A task with rn {values['rn']!r} exists.", rn=values["rn"])
        pk, created, updated = inserted
        task = tasks.model.inserted(tasks.db, values, id=pk, created=created, updated=updated)
        send_on_commit(signals.task_submitted, tasks.db, task=task)
        return task
    task = tasks.model(**values)
    insert_new(tasks, task)
    send_on_commit(signals.task_submitted, tasks.db, task=task)
    return task


def insert_new(tasks: TaskQuerySet, task: Task) -> None:
    """Insert `task` (in a savepoint); DuplicateTask if its rn exists."""
    try:
        with transaction.atomic(using=tasks.db):
            task.save(force_insert=True, using=tasks.db)
    except IntegrityError as exc:
        if tasks.filter(rn=task.rn).exists():
            raise DuplicateTask(f"A task with rn {task.rn!r} exists.", rn=task.rn) from exc
        raise


def submit_after(tasks: TaskQuerySet, task: Task, after: Sequence[str]) -> Task:
    """Insert `task` held until the tasks named by `after` have completed (a follow-up).

    TaskNotFound names the first unknown parent; nothing is inserted then.
    """
    parents = validate_after(after)
    release_at, task.not_before = task.not_before, HELD
    with db.write_atomic(tasks.db):
        found: dict[str, int] = {}
        for start in range(0, len(parents), CHUNK):
            chunk = parents[start : start + CHUNK]
            found.update(
                tasks.model.objects.using(tasks.db).filter(rn__in=chunk).values_list("rn", "pk")
            )
        missing = [rn for rn in parents if rn not in found]
        if missing:
            raise TaskNotFound(
                f"after: no task has rn {missing[0]!r} ({len(missing)} unknown).",
                rn=missing[0],
            )
        insert_new(tasks, task)
        Dependency.objects.using(tasks.db).bulk_create(
            (
                Dependency(child=task, parent_id=found[rn], parent_rn=rn, release_at=release_at)
                for rn in parents
            ),
            batch_size=1000,
        )
    send_on_commit(signals.task_submitted, tasks.db, task=task)
    return task


def submit_many(tasks: TaskQuerySet, items: Iterable[Mapping[str, Any]]) -> list[SubmitOutcome]:
    """Submit several tasks at once, one outcome per item: see `TaskQuerySet.submit_many`."""
    batch = BulkSubmission(items)
    inserted: set[str] = set()
    connection = connections[tasks.db]
    if db.uses_single_statement_transitions(connection):
        # Validated a chunk at a time as the statements go out (see there).
        inserted = inserts.postgresql_submit_many(tasks, batch.chunks(inserts.SUBMIT_CHUNK))
    elif inserts.can_insert_returning_on_conflict(connection):
        with db.write_atomic(tasks.db):
            for chunk in batch.chunks(CHUNK):
                new = [tasks.model(**values) for values in chunk]
                inserted |= inserts.insert_ignoring_duplicates(tasks, new)
    else:
        with db.write_atomic(tasks.db):
            for chunk in batch.chunks(CHUNK):
                for values in chunk:
                    try:
                        with transaction.atomic(using=tasks.db):
                            tasks.model(**values).save(force_insert=True, using=tasks.db)
                        inserted.add(values["rn"])
                    except IntegrityError:
                        pass
    outcomes, pending = batch.outcomes, batch.pending
    notify = signals.task_submitted.has_listeners(tasks.model)
    for index, values in pending:
        status: Literal["inserted", "duplicate"] = (
            "inserted" if values["rn"] in inserted else "duplicate"
        )
        outcomes[index] = SubmitOutcome(index, values["rn"], status)
        if status == "inserted" and notify:
            send_on_commit(signals.task_submitted, tasks.db, task=tasks.model(**values))
    return [outcomes[i] for i in sorted(outcomes)]
