"""The next attempt of an aborted task, under its retry policy (`scylla_django.retries`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections, models
from django.db.models import Q

from .. import db, retries, signals
from ..db import inserts
from ..enums import Status
from .dependencies import Dependency
from .history import _later


def follow_with_retries(manager: models.QuerySet[Any], ids: set[int]) -> None:
    """Follow the tasks `ids` just aborted (by a worker, or for `max_attempts_exceeded`) by
    their next attempt where a retry policy covers the abort. Call it in the aborting
    transaction; only tasks with a policy of their own or of their queue's handler are read.
    """
    if not ids:
        return
    candidates = manager.filter(pk__in=ids, status=Status.ABORTED).filter(
        Q(retry_policy__isnull=False) | Q(queue__in=retries.policy_queues())
    )
    for task in candidates:
        policy = retry_decision(task, task.errors, None)
        if policy is not None:
            submit_retry(task, policy, manager.db)


def retry_decision(
    task: Any, errors: Sequence[Mapping[str, Any]], retry: bool | None
) -> retries.Retry | None:
    """The policy under which this abort is followed by a retry, or None."""
    if retry is False:
        return None
    policy = retries.policy_for(task.queue, task.retry_policy)
    if retry is True:
        policy = policy or retries.Retry()
    elif policy is None or not policy.covers(errors):
        return None
    return policy if policy.allows(task.attempt) else None


def submit_retry(task: Any, policy: retries.Retry | None, using: str) -> Any:
    """Insert the next attempt of this task's chain; return it (None if its rn is taken).

    Called in the transaction that aborted the task, so `updated` is the abort time on the
    database clock; the retry waits the policy's backoff from then (no wait without one).
    Follow-ups waiting for this task wait for the retry instead.
    """
    root = task.root or task.rn
    attempt = task.attempt + 1
    not_before = None if policy is None else task.updated + policy.delay(task.attempt)
    values = dict(
        rn=retries.successor_rn(root, attempt),
        queue=task.queue,
        spec=task.spec,
        priority=task.priority,
        not_before=not_before,
        retry_of=task.rn,
        root=root,
        attempt=attempt,
        retry_policy=task.retry_policy,
    )
    successor = type(task)(**values)
    manager = type(task)._default_manager.using(using)
    # The unique rn (and one retry per task) make a second successor impossible.
    created: Any
    if db.uses_single_statement_transitions(connections[using]):
        # As `submit`: one statement, and listening workers are notified if it is due now.
        inserted = inserts.postgresql_submit(manager, values)
        if inserted is None:
            return None
        successor.pk, successor.created, successor.updated = inserted
        successor._state.adding = False
        successor._state.db = using
        created = successor
    else:
        manager.bulk_create([successor], ignore_conflicts=True)
        created = manager.filter(rn=successor.rn, retry_of=task.rn).first()
        if created is None:
            return None
    Dependency.objects.using(using).filter(parent_id=task.pk).update(
        parent_id=created.pk, parent_rn=created.rn
    )
    _later(signals.task_submitted, using, task=created)
    return created
