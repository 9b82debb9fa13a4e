"""Completion notifications delivered by tasks: a task submitted with `notify=<url>` is
followed, once it is final, by a delivery task on the internal queue `scylla.notify` that
POSTs its outcome, signed (`scylla_django.notify`).

The task keeps its URL in `notify`, and `notified` says when its delivery was submitted. A
task is final when it completed, was cancelled, or aborted with no retry to follow it (a
retry takes the URL over in the aborting transaction, so a retry chain is notified once,
when it ends). `submit_deliveries()`, run by the monitor's `Deliveries` service, finds the
final tasks not yet notified through a partial index, and in one transaction submits each
one's delivery (its rn is `scylla.notify.<task id>`, so a second one cannot exist) and marks
the task notified: every way a task ends (a worker's outcome, an HTTP worker's, a cancel, an
expiry, a monitor's abort, a batch's cancel) is covered by the one rule, and nothing of that
transition waits on the delivery.

The delivery is an ordinary task: leased, heartbeated, shown in the admin and the API (it
names the notified task in `parent`), retried with exponential backoff under its own retry
policy (`NOTIFY_ATTEMPTS`, `NOTIFY_BACKOFF`) while the receiver fails or answers other than
2xx. Its outcome is its own: the task it reports on is never written again.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import QuerySet

from . import db
from .conf import scylla_settings
from .db import Now
from .enums import TERMINAL_STATUSES, Status
from .exceptions import Abort
from .models import Task
from .notify import NOTIFY_QUEUE, body_of, post
from .retries import Exponential, Retry

logger = logging.getLogger("scylla_django")

#: Tasks notified per transaction of `submit_deliveries`.
DELIVERY_BATCH = 500

#: The error code of a POST that failed (retried), and of a task gone before its delivery.
FAILED = "notify_failed"
GONE = "notify_task_gone"


def delivery_rn(task_id: int) -> str:
    """The rn of the delivery of the task `task_id`: one per task, by the unique rn."""
    return f"{NOTIFY_QUEUE}.{task_id}"


def delivery_policy() -> Retry:
    """The retry policy of a delivery: `NOTIFY_ATTEMPTS` POSTs, `NOTIFY_BACKOFF` after the
    first failure and doubling, at most an hour apart; only failed POSTs are retried."""
    return Retry(
        max_attempts=scylla_settings.NOTIFY_ATTEMPTS,
        backoff=Exponential(initial=scylla_settings.NOTIFY_BACKOFF.total_seconds(), cap=3600.0),
        on=(),
        codes=(FAILED,),
        timeouts=True,
        crashes=True,
    )


def pending(tasks: QuerySet[Any]) -> QuerySet[Any]:
    """The final tasks of `tasks` whose delivery was not submitted yet (read through the
    partial index of the tasks to notify)."""
    return tasks.filter(
        notify__isnull=False, notified__isnull=True, status__in=sorted(TERMINAL_STATUSES)
    )


def submit_deliveries(using: str = "default", *, limit: int = DELIVERY_BATCH) -> int:
    """Submit the deliveries of up to `limit` final tasks not yet notified, and mark them
    notified, in one transaction; return how many were submitted. Safe under any number of
    concurrent callers: the rows are locked (SKIP LOCKED where the database has it), the
    mark is conditional and the delivery's rn is unique."""
    tasks = Task.objects.using(using)
    with db.write_atomic(using):
        rows = list(
            pending(tasks)
            .select_for_update(skip_locked=True)
            .order_by("pk")
            .values_list("pk", "rn", "notify")[:limit]
        )
        if not rows:
            return 0
        policy = delivery_policy()
        outcomes = tasks.submit_many(
            {
                "queue": NOTIFY_QUEUE,
                "spec": {"task": rn, "url": url},
                "rn": delivery_rn(pk),
                "retry": policy,
                "parent": rn,
            }
            for pk, rn, url in rows
        )
        tasks.filter(pk__in=[pk for pk, _, _ in rows], notified__isnull=True).update(notified=Now())
    submitted = sum(1 for outcome in outcomes if outcome.outcome == "inserted")
    for outcome in outcomes:
        if outcome.outcome == "invalid":  # a URL the settings no longer allow
            logger.warning("notification %s not submitted: %s", outcome.rn, outcome.errors)
    return submitted


def payload(task: Task) -> dict[str, Any]:
    """What a notification says of `task`: its rn, the rn it was submitted as (`root`, the
    same unless it was retried) and its attempt, queue, status, `result` (completed) or
    `errors`, whether it is a dead letter, and when it was created and finished."""
    body: dict[str, Any] = {
        "rn": task.rn,
        "root": task.root or task.rn,
        "attempt": task.attempt,
        "queue": task.queue,
        "status": task.status,
        "created": task.created,
        "finished": task.updated,
        "dead": task.dead is not None,
    }
    if task.status == Status.COMPLETED:
        body["result"] = task.result
    else:
        body["errors"] = task.errors
    return body


def deliver(delivery: Task) -> dict[str, Any]:
    """Run one delivery: POST the outcome of the task it names to its URL; return what the
    receiver answered (the delivery's result).

    Raises Abort `notify_failed` (retried under the delivery's policy) when the POST failed or
    was answered other than 2xx, and `notify_task_gone` (not retried) when the task was purged.
    """
    using = delivery._state.db or "default"
    spec = delivery.spec
    task = Task.objects.using(using).filter(rn=spec["task"]).first()
    if task is None:
        raise Abort(GONE, f"Task {spec['task']} is gone; nothing to notify.")
    response = post(spec["url"], body_of(payload(task)), delivery.root or delivery.rn)
    if not response.ok:
        what = response.error or f"answered HTTP {response.status}"
        raise Abort(
            FAILED,
            f"The notification of {task.rn} to {spec['url']} failed: {what}.",
            args={"status": response.status, "error": response.error},
        )
    return {"status": response.status}
