"""Unique keys: which task holds a key, the release of a key whose window is over, and what a
submission does when the key it names is held.

The key is a constraint of the schema, not a lookup: the partial unique index
`scylla_task_unique_key` (`UNIQUE_HOLDER` is its condition) admits one holder per key, so
concurrent submissions of a key cannot both insert. See docs/howto/keys.md. The
handlers' default keys are in `scylla_django.queue_keys`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from django.db import models
from django.db.models import F, Q, QuerySet

from .. import db
from ..enums import ACTIVE_STATUSES, TERMINAL_STATUSES, Status
from ..exceptions import DuplicateKey
from .dependencies import AFTER_PARENTS

#: The tasks that hold their key: the condition of the partial unique index on `unique_key`.
UNIQUE_HOLDER = Q(unique_key__isnull=False) & (
    Q(status__in=sorted(s.value for s in ACTIVE_STATUSES)) | Q(unique_held=True)
)

#: What a submission did (`Task.submit_outcome`): inserted a task, found the key's holder
#: (returned as it is), or replaced the holder's spec, priority and not_before.
Submitted = Literal["inserted", "duplicate", "replaced"]


def window_over() -> Q:
    """Finished tasks still flagged as holding their key whose window has passed (on the
    database clock): the ones `release_expired` frees."""
    return Q(
        unique_held=True,
        status__in=sorted(s.value for s in TERMINAL_STATUSES),
        unique_window__isnull=False,
        updated__lte=models.ExpressionWrapper(
            db.Now() - F("unique_window"), output_field=models.DateTimeField()
        ),
    )


def release_expired(tasks: QuerySet[Any], key: str) -> int:
    """Free `key` if a finished task holds it past its window: one conditional write, so a
    task that is still inside its window (or active) keeps it. Returns the rows written."""
    return tasks.filter(window_over(), unique_key=key).update(unique_held=False)


def holder(tasks: QuerySet[Any], key: str) -> Any | None:
    """The task that holds `key`, if any."""
    return tasks.filter(UNIQUE_HOLDER, unique_key=key).first()


def resolve_conflict(
    tasks: QuerySet[Any], existing: Any, values: Mapping[str, Any], on_conflict: str
) -> Any:
    """What a submission of `values` does when `existing` holds its key.

    `return`: `existing`, as it is. `raise`: DuplicateKey naming the key and `existing`'s rn.
    `replace`: a still-ready `existing` (not a held follow-up) gets the new spec, priority and
    not_before in one conditional write, so a lease that took it first wins and it is returned
    as it is. The task returned says which in `submit_outcome`.
    """
    key = existing.unique_key or ""
    if on_conflict == "raise":
        raise DuplicateKey(
            f"Task {existing.rn} holds the unique key {key!r}.", key=key, rn=existing.rn
        )
    if on_conflict == "replace":
        replaced = (
            tasks.filter(pk=existing.pk, status=Status.READY)
            .exclude(not_before=AFTER_PARENTS)
            .update(
                spec=values["spec"],
                priority=values["priority"],
                not_before=values["not_before"],
                version=values.get("version"),
                updated=db.Now(),
            )
        )
        if replaced:
            existing.refresh_from_db(using=tasks.db)
            return mark(existing, "replaced")
    return mark(existing, "duplicate")


def mark(task: Any, outcome: Submitted) -> Any:
    """`task`, its `submit_outcome` set: what the submission that returned it did."""
    task.submit_outcome = outcome
    return task
