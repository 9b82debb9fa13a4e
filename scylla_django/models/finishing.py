"""Finishing: the outcomes of a batch of leases written at once (completed or aborted), the
retries that follow the aborts, and `task_finished` for each task written.

`TaskQuerySet.finish_many` and `finish_and_lease` are these functions; an `Outcome` and the rows
written from it are in `outcomes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from django.db.models import QuerySet

from .. import db, retries, signals, validation
from ..exceptions import WorkerNotFound
from . import children, successors
from .notices import send_each_on_commit
from .outcomes import Outcome, outcome_rows
from .processes import Worker, lease_terms, worker_name
from .tables import tables


def finish_many(tasks: QuerySet[Any], name: str, outcomes: Sequence[Outcome]) -> set[int]:
    """Write `outcomes` for the worker called `name`: see `TaskQuerySet.finish_many`."""
    snoozed = children.snooze_outcomes(tasks, name, [o for o in outcomes if o.snooze is not None])
    ending = [o for o in outcomes if o.snooze is None]
    return snoozed | finish_rows(tasks, name, ending, outcome_rows(ending))


def finish_rows(
    tasks: QuerySet[Any], name: str, outcomes: Sequence[Outcome], rows: list[dict[str, Any]]
) -> set[int]:
    """`finish_many` of `outcomes`, whose `rows` are already built; return the pks written.

    An abort that a retry policy covers, or whose errors ask for a retry themselves
    (`Abort(..., retry=True)`), is followed by its next attempt in the same transaction; a
    completion, by the children its handler spawned.
    """
    if not rows:
        return set()
    aborted = {row["id"] for row in rows if row["errors"] is not None}
    if any(outcome.children for outcome in outcomes) and not aborted:
        with db.write_atomic(tasks.db):
            done = write(tasks, name, rows)
            children.submit_children(tasks, outcomes, set(done))
    elif aborted:
        requested = {
            row["id"]
            for row in rows
            if row["errors"] is not None and retries.retry_requested(row["errors"])
        }
        with db.write_atomic(tasks.db):
            done = write(tasks, name, rows)
            successors.follow_with_retries(
                tasks.model.objects.using(tasks.db), done.keys() & aborted, done.keys() & requested
            )
            children.submit_children(tasks, outcomes, set(done))
    else:
        done = write(tasks, name, rows)
    announce(tasks, outcomes, rows, done)
    return set(done)


def finish_and_lease(
    tasks: QuerySet[Any],
    worker: Worker | str,
    outcomes: Sequence[Outcome],
    queues: Sequence[str],
    limit: int,
    lease_length: timedelta | float | None,
    timeouts: Mapping[str, timedelta | float | str | None] | None,
    timeout_grace: timedelta | float | None,
    reservation: timedelta | float | None = None,
) -> tuple[set[int], list[Any]]:
    """Finish `outcomes`, then lease for `worker`: see `TaskQuerySet.finish_and_lease`."""
    name = worker_name(worker)
    snoozed = children.snooze_outcomes(tasks, name, [o for o in outcomes if o.snooze is not None])
    outcomes = [o for o in outcomes if o.snooze is None]
    pk = validation.worker_id(name)
    # Validated before anything is finished. A name that is no worker's (pk None) is refused
    # by the lease below, after the outcomes are written: 0 stands in for its pk meanwhile.
    terms = lease_terms(
        0 if pk is None else pk,
        name,
        queues,
        limit,
        lease_length,
        timeouts,
        timeout_grace,
        reservation,
    )
    rows = outcome_rows(outcomes)
    driver = db.driver(tasks.db)
    aborting = any(row["errors"] is not None for row in rows)
    spawning = any(outcome.children for outcome in outcomes)
    if not driver.finishes_and_leases_at_once or pk is None or not rows or aborting or spawning:
        finished = snoozed | finish_rows(tasks, name, outcomes, rows)
        try:
            leased = tasks.lease(  # type: ignore[attr-defined]  # a TaskQuerySet
                worker,
                terms.queues,
                limit=terms.limit,
                lease_length=terms.lease_length,
                timeouts=terms.timeouts,
                timeout_grace=terms.timeout_grace,
                reservation=terms.reservation,
            )
            return finished, leased
        except WorkerNotFound:
            return finished, []
    done, leased_tasks = driver.finish_and_lease(tables(tasks.model), terms, rows)
    announce(tasks, outcomes, rows, done)
    send_each_on_commit(
        signals.task_leased, tasks.db, tasks.model, [(task, {}) for task in leased_tasks]
    )
    return snoozed | set(done), leased_tasks


def write(tasks: QuerySet[Any], name: str, rows: list[dict[str, Any]]) -> dict[int, datetime]:
    """Write `rows` for the worker called `name`: each task written, with its `updated`."""
    return db.driver(tasks.db).finish(tables(tasks.model), name, rows)


def announce(
    tasks: QuerySet[Any],
    outcomes: Sequence[Outcome],
    rows: list[dict[str, Any]],
    done: Mapping[int, datetime],
) -> None:
    """Send `task_finished` for the tasks written from `rows` (`done`: their pks, each with
    its `updated`), as written, each with its handler's run time.

    An outcome that carries its task (as the worker's do) gets that instance updated in
    place, with no query; the others are read back, in one query.
    """
    if not done or not signals.task_finished.has_listeners(tasks.model):
        return
    written = {row["id"]: row for row in rows if row["id"] in done}
    missing = [o.pk for o in outcomes if o.pk in written and o.task is None]
    read = tasks.model.objects.using(tasks.db).in_bulk(missing) if missing else {}
    sends: list[tuple[Any, dict[str, Any]]] = []
    for outcome in outcomes:
        row = written.pop(outcome.pk, None)
        if row is None:
            continue
        task = cast("Any", outcome.task)
        if task is None:
            task = read.get(outcome.pk)
            if task is None:  # purged since: nothing left to describe
                continue
        else:
            task.status, task.deadline, task.updated = row["status"], None, done[outcome.pk]
            task.cpu_time, task.peak_memory = row.get("cpu_time"), row.get("peak_memory")
            task.log = row.get("log") or task.log
            if row["errors"] is None:
                task.progress, task.result = 1.0, row["result"]
            else:
                task.errors = row["errors"]
        sends.append((task, {"status": task.status, "duration": outcome.duration}))
    send_each_on_commit(signals.task_finished, tasks.db, tasks.model, sends)
