"""Successors: the next attempt of an aborted task, under its retry policy
(`scylla_django.retries`) or by hand, and the follow-ups that wait for it instead.

Every task of a retry chain names the chain's first task in `root`, the first task included
(it gets its own rn there when its first retry is submitted).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import Q

from .. import db, retries, signals
from ..db import Now
from ..durations import short
from ..enums import Status
from ..exceptions import DuplicateKey, DuplicateTask, InvalidTransition, TaskNotFound
from ..text import plural
from .batches import count_finished, count_requeued
from .dependencies import Dependency
from .notices import send_on_commit
from .traces import copy_trace
from .unique import UNIQUE_HOLDER
from .waits import carry_over

logger = logging.getLogger("scylla_django")


def follow_with_retries(
    manager: models.QuerySet[Any], ids: set[int], requested: set[int] | None = None
) -> None:
    """Follow the tasks `ids` just aborted (by a worker, or for `max_leases_exceeded`) by
    their next attempt where a retry policy covers the abort, or where the abort asks for a
    retry itself (`requested`: an error with `"retry": true`). Call it in the aborting
    transaction; only tasks with a policy of their own or of their queue (`SCYLLA["RETRY"]`,
    their handler's), and the `requested` ones, are read.
    """
    if not ids:
        return
    candidates = manager.filter(pk__in=ids, status=Status.ABORTED)
    queues = retries.policy_queues()
    if queues is not None:  # None: a default policy covers every queue
        candidates = candidates.filter(
            Q(retry_policy__isnull=False) | Q(queue__in=queues) | Q(pk__in=sorted(requested or ()))
        )
    followed: set[int] = set()
    for task in candidates:
        policy = retry_decision(task, task.errors, None)
        if policy is not None and submit_retry(task, policy, manager.db) is not None:
            followed.add(task.pk)
    give_up(manager, ids - followed)


def give_up(manager: models.QuerySet[Any], ids: set[int]) -> None:
    """Mark the tasks `ids`, just aborted and not retried, dead (a dead letter, kept until an
    operator acts), and count them as failed in their batches; in the aborting transaction."""
    if not ids:
        return
    dead = manager.filter(pk__in=sorted(ids), status=Status.ABORTED, dead__isnull=True)
    rows = list(dead.values("pk", "batch_id", "status"))
    if not rows:
        return
    manager.filter(pk__in=[row["pk"] for row in rows]).update(dead=Now())
    count_finished(manager.db, rows)


def retry_decision(
    task: Any, errors: Sequence[Mapping[str, Any]], retry: bool | None
) -> retries.Retry | None:
    """The policy under which this abort is followed by a retry, or None.

    A retry is asked for by `retry=True` (`Task.abort`, the HTTP abort's `"retry": true`) or by
    an error that says `"retry": true` (`Abort(..., retry=True)` in a handler), and is made
    under the task's policy, else its queue's (`retries.queue_policy`), else `Retry()`.
    Without such a request a policy must cover the errors; `retry=False` never retries. A chain
    that has used up its policy's attempts is logged as given up.
    """
    if retry is False:
        return None
    if retry is None and retries.retry_requested(errors):
        retry = True
    policy = retries.policy_for(task.queue, task.retry_policy)
    if retry is True:
        policy = policy or retries.Retry()
    elif policy is None or not policy.covers(errors):
        return None
    if policy.allows(task.attempt):
        return policy
    logger.info("%s failed: gave up after %s", task.rn, plural(task.attempt, "attempt"))
    return None


def submit_retry(task: Any, policy: retries.Retry | None, using: str) -> Any:
    """Insert the next attempt of this task's chain; return it (None if its rn is taken).

    Called in the transaction that aborted the task, so `updated` is the abort time on the
    database clock; the retry waits the policy's backoff from then (no wait without one).
    The first task of a chain becomes its own `root`. Follow-ups waiting for this task wait for
    the retry instead.
    """
    model = type(task)
    manager = model._default_manager.using(using)
    if task.root is None:
        manager.filter(pk=task.pk, root__isnull=True).update(root=task.rn)
        task.root = task.rn
    root = task.root
    attempt = task.attempt + 1
    delay = None if policy is None else policy.delay(task.attempt)
    values = dict(
        rn=retries.successor_rn(root, attempt),
        queue=task.queue,
        spec=task.spec,
        priority=task.priority,
        not_before=None if delay is None else task.updated + delay,
        retry_of=task.rn,
        root=root,
        batch_id=task.batch_id,
        attempt=attempt,
        retry_policy=task.retry_policy,
        timeout=task.timeout,
        keys=task.keys,
        order_key=task.order_key,
        order_seq=None if task.order_key is None else (task.order_seq or task.pk),
        order_block=task.order_block,
        rate_cost=task.rate_cost,
        fair_key=task.fair_key,
        notify=task.notify,
        version=task.version,
    )
    if task.notify is not None:
        # The chain is notified once, when it ends: the retry takes the notification over
        # (unless this task's went out already, as a requeued dead letter's did).
        manager.filter(pk=task.pk, notified__isnull=True).update(notify=None)
    if task.unique_key is not None:
        # The chain is one logical task: the retry holds its key. Without a window the task
        # it follows let the key go when it left running (in this transaction, so no other
        # submission can take it in between); with one, the retry takes the key over.
        manager.filter(pk=task.pk, unique_held=True).update(unique_held=False)
        values.update(
            unique_key=task.unique_key,
            unique_window=task.unique_window,
            unique_held=task.unique_window is not None,
        )
    successor = model(**values)
    # The unique rn (and one retry per task) make a second successor impossible.
    created: Any
    if task.unique_key is not None:
        created = _insert_keyed(manager, successor)
        if created is None:
            return None
        if delay is None:
            db.notify_ready(using, [created.queue])
    else:
        # As `submit`: one statement where the driver can, and listening workers are notified
        # if it is due now.
        inserted = db.driver(using).submit(manager, values)
        if not isinstance(inserted, tuple):
            return None
        successor.pk, successor.created, successor.updated = inserted
        successor._state.adding = False
        successor._state.db = using
        created = successor
    Dependency.objects.using(using).filter(parent_id=task.pk).update(
        parent_id=created.pk, parent_rn=created.rn
    )
    copy_trace(using, task.rn, created.rn)
    if retries.resumes(policy, task.retry_policy):
        carry_over(task.pk, created.pk, using)
    if policy is not None and delay is not None:
        logger.info(
            "%s failed: retry %d of %d in %s",
            task.rn,
            attempt,
            policy.max_attempts,
            short(delay),
        )
    send_on_commit(signals.task_submitted, using, task=created)
    return created


def _insert_keyed(manager: models.QuerySet[Any], successor: Any) -> Any:
    """Insert the keyed `successor` (in a savepoint); None if its rn exists, DuplicateKey if
    another task holds its key (a manual retry of a task whose key was taken since)."""
    try:
        with transaction.atomic(using=manager.db):
            successor.save(force_insert=True, using=manager.db)
    except IntegrityError:
        if manager.filter(rn=successor.rn).exists():
            return None
        holder = manager.filter(UNIQUE_HOLDER, unique_key=successor.unique_key).first()
        if holder is None:
            raise
        raise DuplicateKey(
            f"Task {holder.rn} holds the unique key {successor.unique_key!r}.",
            key=successor.unique_key,
            rn=holder.rn,
        ) from None
    return successor


def resubmit(task: Any) -> Any:
    """Resubmit this aborted or cancelled task by hand: see `Task.retry`."""
    using = task._state.db or "default"
    manager = type(task)._default_manager.using(using)
    with db.write_atomic(using):
        status = manager.filter(pk=task.pk).values_list("status", flat=True).first()
        if status is None:
            raise TaskNotFound(f"No task has rn {task.rn!r}.", rn=task.rn)
        if status not in (Status.ABORTED, Status.CANCELLED):
            raise InvalidTransition(
                f"Only an aborted or cancelled task can be retried; {task.rn} is {status}.",
                rn=task.rn,
                status=status,
            )
        existing = manager.filter(retry_of=task.rn).values_list("rn", flat=True).first()
        if existing is not None:
            raise DuplicateTask(f"Task {task.rn} was already retried as {existing}.", rn=existing)
        successor = submit_retry(task, None, using)
        if successor is None:
            rn = retries.successor_rn(task.root or task.rn, task.attempt + 1)
            raise DuplicateTask(f"A task with rn {rn!r} exists.", rn=rn)
        # A dead letter requeued is dead no more; its batch waits for the retry instead.
        manager.filter(pk=task.pk, dead__isnull=False).update(dead=None)
        task.dead = None
        count_requeued(using, task.batch_id)
        return successor
