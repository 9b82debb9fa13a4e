"""Submission: new tasks inserted one at a time (`submit`, with or without parents) or in bulk
(`submit_many`), each followed by `task_submitted` once committed.

`TaskQuerySet.submit` and `submit_many` are these functions; the arguments and the validation of
a submission are in `inputs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Unpack

from django.db import (
    IntegrityError,
    NotSupportedError,
    OperationalError,
    transaction,
)
from django.db.models import QuerySet

from .. import db, signals
from ..exceptions import DuplicateKey, DuplicateTask, QueueFull, TaskNotFound
from . import admission, serving, unique
from .admission import NONE, Admission
from .dependencies import AFTER_PARENTS, Dependency
from .inputs import (
    BulkSubmission,
    SubmitOutcome,
    TaskOptions,
    on_conflict_of,
    task_values,
    validate_after,
)
from .notices import send_on_commit
from .origins import Submitter
from .traces import keep_traces, take_traceparent

#: Parents looked up per query, and tasks validated and inserted per chunk (off PostgreSQL).
CHUNK = 500


#: Keyed submission statements tried before giving up (each try after the first follows a
#: holder that committed after the last one's snapshot, or a released window).
KEYED_TRIES = 5


def submit(
    tasks: QuerySet[Any],
    queue: str,
    spec: Any,
    *,
    after: Sequence[str] | None = None,
    on_conflict: str | None = None,
    admitted: Admission = NONE,
    **options: Unpack[TaskOptions],
) -> Any:
    """Submit a new `ready` task to the database of `tasks`: see `TaskQuerySet.submit`.

    `admitted` says what the caps on ready tasks do with it and who submits it
    (`admission`)."""

    def insert() -> Any:
        task = insert_submission(
            tasks, queue, spec, after=after, on_conflict=on_conflict, **options
        )
        admission.record_origin(tasks, task, admitted)
        return task

    task = None
    if admitted.key is None and not admitted.records and after is None:
        # On PostgreSQL one statement, which inserts nothing if the queue is capped; then, and
        # elsewhere, the cap's way.
        task = insert_submission(
            tasks, queue, spec, after=None, on_conflict=on_conflict, unless_capped=True, **options
        )
    if task is None:
        task = admission.admit(tasks, queue, admitted, insert)
    serving.warn_unserved([task.queue], tasks.db)
    return task


def insert_submission(
    tasks: QuerySet[Any],
    queue: str,
    spec: Any,
    *,
    after: Sequence[str] | None,
    on_conflict: str | None,
    unless_capped: bool = False,
    **options: Unpack[TaskOptions],
) -> Any:
    """The insertion of `submit`: the task, inserted (or the holder of its unique key), and
    the traceparent of a traced one beside it, in the same transaction.

    With `unless_capped` (no `after`): the task only if the driver's insert, which judges the
    caps (`Driver.judges_caps_in_insert`: PostgreSQL's one statement), inserted it; None,
    having written nothing, when the queue has a cap on ready tasks, the task has a unique
    key, or the driver's insert does not judge caps (the caller then submits it through
    `admission`)."""
    if unless_capped and not db.driver(tasks.db).judges_caps_in_insert:
        return None
    conflict = on_conflict_of(on_conflict)
    values = task_values(queue, spec, **options)
    traceparent = take_traceparent(values)
    if traceparent is None:
        return insert_values(tasks, values, conflict, after, unless_capped=unless_capped)
    with db.write_atomic(tasks.db):
        task = insert_values(tasks, values, conflict, after, unless_capped=unless_capped)
        if task is not None and task.submit_outcome == "inserted":
            keep_traces(tasks.db, {task.rn: traceparent})
    return task


def insert_values(
    tasks: QuerySet[Any],
    values: dict[str, Any],
    conflict: str,
    after: Sequence[str] | None,
    *,
    unless_capped: bool = False,
) -> Any:
    """Insert the task of the validated `values` (or return the holder of its unique key);
    with `unless_capped`, None if the queue is capped or the task keyed (see
    `insert_submission`)."""
    if "unique_key" in values:
        if unless_capped:
            return None
        return submit_keyed(tasks, values, conflict, after)
    if after is not None:
        return submit_after(tasks, tasks.model(**values), after)
    inserted = db.driver(tasks.db).submit(tasks, values, unless_capped=unless_capped)
    if inserted == db.CAPPED:
        return None
    if not isinstance(inserted, tuple):
        raise DuplicateTask(f"A task with rn {values['rn']!r} exists.", rn=values["rn"])
    pk, created, updated = inserted
    task = tasks.model.inserted(tasks.db, values, id=pk, created=created, updated=updated)
    send_on_commit(signals.task_submitted, tasks.db, task=task)
    return unique.mark(task, "inserted")


def submit_keyed(
    tasks: QuerySet[Any],
    values: dict[str, Any],
    on_conflict: str,
    after: Sequence[str] | None = None,
) -> Any:
    """Submit a task with a unique key: inserted if no task holds the key, else what
    `on_conflict` says (`unique.resolve_conflict`).

    Where the driver can (PostgreSQL): one statement (`Driver.submit_keyed`) in which the
    unique index decides; a second one only when the holder committed after the first one's
    snapshot, or finished longer than its window ago (then the key is released first).
    Elsewhere the submission is one write transaction: SQLite serialises those, so nothing can
    take the key between the look-up and the insert, and the index stands behind it.
    """
    driver = db.driver(tasks.db)
    if not driver.enforces_unique_keys:
        raise NotSupportedError(
            "Unique keys need partial unique indexes, which this database (MySQL/MariaDB) "
            "lacks; submit without unique_key."
        )
    key = values["unique_key"]
    if after is None and driver.submits_keyed_in_one_statement:
        for _ in range(KEYED_TRIES):
            found = driver.submit_keyed(tasks, values)
            if found is None:
                if tasks.filter(rn=values["rn"]).exists():
                    raise DuplicateTask(f"A task with rn {values['rn']!r} exists.", rn=values["rn"])
                continue
            inserted, window_over, row = found
            task = tasks.model.from_db(
                tasks.db, [f.attname for f in tasks.model._meta.concrete_fields], row
            )
            if inserted:
                send_on_commit(signals.task_submitted, tasks.db, task=task)
                return unique.mark(task, "inserted")
            if window_over:
                unique.release_expired(tasks, key)
                continue
            return unique.resolve_conflict(tasks, task, values, on_conflict)
        raise OperationalError(f"Unique key {key!r}: no holder and no insert; try again.")
    with db.write_atomic(tasks.db):
        unique.release_expired(tasks, key)
        existing = unique.holder(tasks, key)
        if existing is not None:
            return unique.resolve_conflict(tasks, existing, values, on_conflict)
        task = tasks.model(**values)
        if after is not None:
            return submit_after(tasks, task, after)
        insert_new(tasks, task)
    send_on_commit(signals.task_submitted, tasks.db, task=task)
    return unique.mark(task, "inserted")


def insert_new(tasks: QuerySet[Any], task: Any) -> None:
    """Insert `task` (in a savepoint); DuplicateTask if its rn exists."""
    try:
        with transaction.atomic(using=tasks.db):
            task.save(force_insert=True, using=tasks.db)
    except IntegrityError as exc:
        if tasks.filter(rn=task.rn).exists():
            raise DuplicateTask(f"A task with rn {task.rn!r} exists.", rn=task.rn) from exc
        existing = None if task.unique_key is None else unique.holder(tasks, task.unique_key)
        if existing is not None:
            key = task.unique_key or ""
            raise DuplicateKey(
                f"Task {existing.rn} holds the unique key {key!r}.", key=key, rn=existing.rn
            ) from exc
        raise


def submit_after(tasks: QuerySet[Any], task: Any, after: Sequence[str]) -> Any:
    """Insert `task` held until the tasks named by `after` have completed (a follow-up).

    TaskNotFound names the first unknown parent; nothing is inserted then.
    """
    parents = validate_after(after)
    release_at, task.not_before = task.not_before, AFTER_PARENTS
    task.after = parents
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
    return unique.mark(task, "inserted")


def submit_many(
    tasks: QuerySet[Any],
    items: Iterable[Mapping[str, Any]],
    *,
    submitter: Submitter | None = None,
) -> list[SubmitOutcome]:
    """Submit several tasks at once, one outcome per item: see `TaskQuerySet.submit_many`."""
    if submitter is not None:
        submitter = submitter.validated()
        # The tasks and the rows that record their submitter: one transaction.
        with db.write_atomic(tasks.db):
            return _submit_many(tasks, items, submitter)
    return _submit_many(tasks, items, None)


def _submit_many(
    tasks: QuerySet[Any], items: Iterable[Mapping[str, Any]], submitter: Submitter | None
) -> list[SubmitOutcome]:
    bulk = BulkSubmission(items)
    keyed: list[dict[str, Any]] = []
    gated: list[dict[str, Any]] = []
    traced: dict[str, str] = {}
    driver = db.driver(tasks.db)
    # A driver whose insert judges the caps leaves out the items of capped queues (found
    # after it, below); elsewhere the capped queues are looked up first.
    capped = _CappedQueues(tasks.db, look_up=not driver.judges_caps_in_insert)

    def keyless(size: int) -> Iterator[list[dict[str, Any]]]:
        return _keyless(bulk.chunks(size), keyed, gated, capped, traced)

    left_out: set[str] = set()
    inserted = driver.submit_many(tasks, keyless, left_out)
    if left_out:
        gated += [values for _, values in bulk.pending if values["rn"] in left_out]
    if submitter is not None and inserted:
        admission.record_origins(tasks, inserted, submitter)
    # Keyed items, and those a cap on ready tasks counts, one at a time, each as `submit`
    # would (the index, and the caps, decide each), after the others; a key held by a task,
    # or by an earlier item, is reported as a duplicate with the holder's rn, an item a cap
    # refused as `full`.
    found: dict[str, tuple[str, str]] = {}
    for values in [*gated, *keyed]:
        conflict = values.pop("on_conflict", None) or "return"
        given = values.pop("admission", NONE)
        admitted = Admission(given.key, given.on_full, given.wait, submitter)
        try:
            task = admission.admit(
                tasks,
                values["queue"],
                admitted,
                partial(_insert_item, tasks, values, conflict, admitted),
            )
        except DuplicateTask:
            found[values["rn"]] = (values["rn"], "duplicate")
            continue
        except QueueFull:
            found[values["rn"]] = (values["rn"], "full")
            continue
        found[values["rn"]] = (task.rn, task.submit_outcome or "duplicate")
    outcomes, pending = bulk.outcomes, bulk.pending
    notify = signals.task_submitted.has_listeners(tasks.model)
    for index, values in pending:
        rn, status = found.get(
            values["rn"],
            (values["rn"], "inserted" if values["rn"] in inserted else "duplicate"),
        )
        outcomes[index] = SubmitOutcome(index, rn, status)
        if values["rn"] in found:
            continue
        if status == "inserted" and notify:
            send_on_commit(signals.task_submitted, tasks.db, task=tasks.model(**values))
    if traced:
        # Right after the tasks (in the caller's transaction, if any): the items' traces are
        # known only once the items were validated, chunk by chunk as the inserts went out,
        # and an untraced bulk stays the one statement in autocommit it was.
        keep_traces(
            tasks.db,
            {
                o.rn: traced[o.rn]
                for o in outcomes.values()
                if o.outcome == "inserted" and o.rn is not None and o.rn in traced
            },
        )
    serving.warn_unserved((values["queue"] for _, values in pending), tasks.db)
    return [outcomes[i] for i in sorted(outcomes)]


def _insert_item(
    tasks: QuerySet[Any], values: dict[str, Any], on_conflict: str, admitted: Admission
) -> Any:
    """Insert one item of a bulk submission on its own (a keyed or a capped one)."""
    if "unique_key" in values:
        task = submit_keyed(tasks, values, "return" if on_conflict == "raise" else on_conflict)
    else:
        task = tasks.model(**values)
        insert_new(tasks, task)
        send_on_commit(signals.task_submitted, tasks.db, task=task)
        unique.mark(task, "inserted")
    admission.record_origin(tasks, task, admitted)
    return task


class _CappedQueues:
    """Whether a queue has a cap on ready tasks, each queue looked up once per call."""

    def __init__(self, using: str, *, look_up: bool = True) -> None:
        self.using = using
        self.look_up = look_up
        self.known: dict[str, bool] = {}

    def __call__(self, chunk: Iterable[dict[str, Any]]) -> set[str]:
        if not self.look_up:
            return set()
        new = {values["queue"] for values in chunk} - set(self.known)
        if new:
            capped = admission.capped_queues(self.using, new)
            self.known.update({queue: queue in capped for queue in new})
        return {queue for queue, is_capped in self.known.items() if is_capped}


def _keyless(
    chunks: Iterable[list[dict[str, Any]]],
    keyed: list[dict[str, Any]],
    gated: list[dict[str, Any]],
    capped: _CappedQueues,
    traced: dict[str, str],
) -> Iterator[list[dict[str, Any]]]:
    """`chunks` without their items that a cap on ready tasks counts (appended to `gated`)
    or that are keyed (appended to `keyed`), and without their traceparents, taken into
    `traced` by rn; a chunk left empty is skipped."""
    for chunk in chunks:
        for values in chunk:
            traceparent = take_traceparent(values)
            if traceparent is not None:
                traced[values["rn"]] = traceparent
        caps = capped(chunk)
        plain = []
        for values in chunk:
            if "admission" in values or values["queue"] in caps:
                gated.append(values)
            elif "unique_key" in values:
                keyed.append(values)
            else:
                plain.append(values)
        if plain:
            yield plain
