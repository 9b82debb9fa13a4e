"""Admission control: caps on ready tasks, checked by the submission itself.

A queue may cap its ready tasks (`QueueSetting.max_ready`, set in the admin, the API or
`scylla_queue cap`), and an admission key may be capped by `SCYLLA["MAX_READY"]` (a
submission names its key with `admission_key="tenant:42"`). A submission that finds a cap
reached does what `on_full` says: "reject" raises QueueFull (HTTP 429 with `Retry-After`),
"shed_oldest" cancels the oldest ready task of the queue (or key) with the error code `shed`
and goes in, "wait" (a Python caller's choice) tries again until its `wait` timeout passes.

Why it holds under concurrent submissions: the count and the insert are one transaction that
first takes the cap's lock (the queue's `QueueSetting` row `FOR UPDATE`; an admission key's
lock, `db.lock_admission_key`), so two submissions of one queue cannot both count before
either inserts; after the lock, each statement reads what the previous holder committed.
Only the submissions to a capped queue meet there: an uncapped queue's submission takes no
lock and stays one statement. Tasks that become ready again without a submission (a reset
lease, a yield) are not refused: the cap governs admission, not the backlog already in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import transaction
from django.db.models import QuerySet

from .. import db
from ..conf import scylla_settings
from ..enums import Status
from ..exceptions import QueueFull, error_record
from .forecast import retry_after
from .origins import Submitter, origin_row, validate_admission_key
from .queues import REJECT, SHED_OLDEST, WAIT, QueueSetting, validate_on_full

T = TypeVar("T")

#: The error code a task cancelled to make room for a newer one gets.
SHED = "shed"

#: The first and the longest pause of a waiting submission between tries, in seconds.
WAIT_FIRST = 0.05
WAIT_LONGEST = 1.0


@dataclass(frozen=True)
class Admission:
    """What a submission says about admission: its admission key, what it does when full
    (None: the cap's own choice) and how long it waits (`on_full="wait"`), and its
    submitter (recorded beside the task, see `origins`)."""

    key: str | None = None
    on_full: str | None = None
    wait: float | None = None
    submitter: Submitter | None = None

    @classmethod
    def of(
        cls,
        *,
        admission_key: object = None,
        on_full: object = None,
        wait: object = None,
        submitter: Submitter | None = None,
    ) -> Admission:
        """A validated Admission (ValidationError naming the bad argument)."""
        from django.core.exceptions import ValidationError

        mode = None if on_full is None else validate_on_full(on_full)
        if wait is not None and (
            isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0
        ):
            raise ValidationError({"wait": "wait is a number of seconds (0 or more)."})
        if wait is not None and mode != WAIT:
            raise ValidationError({"wait": 'wait is given with on_full="wait" only.'})
        return cls(
            key=validate_admission_key(admission_key),
            on_full=mode,
            wait=None if wait is None else float(wait),
            submitter=None if submitter is None else submitter.validated(),
        )

    @property
    def records(self) -> bool:
        """Whether a submission with this admission writes an origin row."""
        return origin_row(0, self.submitter, self.key) is not None


NONE = Admission()


@dataclass(frozen=True)
class Cap:
    """One cap a submission must pass: a queue's or an admission key's."""

    queue: str | None
    key: str | None
    max_ready: int
    on_full: str

    @property
    def scope(self) -> str:
        """The cap as errors name it: "queue emails", "key tenant:42"."""
        return f"queue {self.queue}" if self.queue is not None else f"key {self.key}"


def key_cap(key: str) -> int | None:
    """The cap `SCYLLA["MAX_READY"]` gives admission key `key`: its own, else its family's
    (the part before its first colon), else None."""
    caps = scylla_settings.MAX_READY
    if key in caps:
        return caps[key]
    family, colon, _ = key.partition(":")
    return caps.get(family) if colon else None


def caps_of(using: str, queue: str, key: str | None) -> list[Cap]:
    """The caps a submission to `queue` (with admission key `key`) must pass, queue first:
    one indexed read of the queue's setting."""
    caps = [
        Cap(queue, None, max_ready or 0, on_full)
        for max_ready, on_full in QueueSetting.objects.using(using)
        .filter(queue=queue, max_ready__isnull=False)
        .values_list("max_ready", "on_full")
    ]
    if key is not None and (size := key_cap(key)) is not None:
        caps.append(Cap(None, key, size, REJECT))
    return caps


def capped_queues(using: str, queues: set[str]) -> set[str]:
    """Which of `queues` have a cap on ready tasks: one query."""
    return set(
        QueueSetting.objects.using(using)
        .filter(queue__in=sorted(queues), max_ready__isnull=False)
        .values_list("queue", flat=True)
    )


def ready_in(tasks: QuerySet[Any], cap: Cap) -> QuerySet[Any]:
    """The ready tasks a cap counts."""
    ready: QuerySet[Any] = tasks.model.objects.using(tasks.db).filter(status=Status.READY)
    if cap.queue is not None:
        return ready.filter(queue=cap.queue)
    return ready.filter(origin__admission_key=cap.key)


def admit(tasks: QuerySet[Any], queue: str, admission: Admission, insert: Callable[[], T]) -> T:
    """Run `insert` (which inserts one task and returns it) once the caps of `queue` and of
    the admission's key let the task in, in one transaction with their checks; QueueFull
    when they do not (see the module). A submission to an uncapped queue with nothing to
    record runs `insert` alone."""
    caps = caps_of(tasks.db, queue, admission.key)
    if not caps:
        if not admission.records:
            return insert()
        with db.write_atomic(tasks.db):
            return insert()
    waits_until = None
    if admission.on_full == WAIT:
        waits_until = time.monotonic() + (admission.wait or 0.0)
    pause = WAIT_FIRST
    while True:
        try:
            return _admit_once(tasks, caps, admission, insert)
        except QueueFull as full:
            left = None if waits_until is None else waits_until - time.monotonic()
            if left is None or left <= 0:
                # Forecast once the cap's lock is let go, not while holding it.
                capped = next((c.queue for c in caps if c.scope == full.scope), None)
                full.retry_after = retry_after(tasks.db, capped)
                raise
        time.sleep(min(pause, left))
        pause = min(pause * 2, WAIT_LONGEST)


class _NotInserted(Exception):
    """The submission found its unique key held: nothing of it is kept (a shed undone)."""

    def __init__(self, task: Any) -> None:
        super().__init__()
        self.task = task


def _admit_once(
    tasks: QuerySet[Any], caps: list[Cap], admission: Admission, insert: Callable[[], T]
) -> T:
    try:
        with db.write_atomic(tasks.db):
            full = [cap for cap in caps if not _take_place(tasks, cap, admission.on_full)]
            task = insert()
            if getattr(task, "submit_outcome", "inserted") == "duplicate":
                raise _NotInserted(task)
            # After the insert, so that a submission that found its unique key held (and
            # inserted nothing) sheds nothing either.
            for cap in full:
                shed_oldest(tasks, cap, besides=getattr(task, "pk", None))
            return task
    except _NotInserted as returned:
        found: T = returned.task
        return found


def _take_place(tasks: QuerySet[Any], cap: Cap, on_full: str | None) -> bool:
    """Lock `cap` and count its ready tasks: True when there is room, False when the
    oldest is to be shed once the new task is in; QueueFull when the submission is refused."""
    max_ready = cap.max_ready
    if cap.queue is not None:
        # The lock; and the cap as it is now (an operator may have changed it).
        current = (
            QueueSetting.objects.using(tasks.db)
            .select_for_update()
            .filter(queue=cap.queue)
            .values_list("max_ready", "on_full")
            .first()
        )
        if current is None or current[0] is None:
            return True
        max_ready = current[0]
        cap = Cap(cap.queue, None, max_ready, current[1])
    else:
        db.lock_admission_key(tasks.db, cap.key or "")
    ready = ready_in(tasks, cap)
    if ready.order_by()[:max_ready].count() < max_ready:
        return True
    if (on_full or cap.on_full) == SHED_OLDEST:
        return False
    raise QueueFull(
        f"The {cap.scope} holds its {max_ready} ready tasks (max_ready); try again later.",
        scope=cap.scope,
        max_ready=max_ready,
        retry_after=1,
    )


def shed_oldest(tasks: QuerySet[Any], cap: Cap, besides: int | None = None) -> int:
    """Cancel the oldest ready task that `cap` counts (other than `besides`), recording the
    error code `shed`; how many were cancelled (0 when a worker leased it first: the count
    fell anyway)."""
    oldest = list(
        ready_in(tasks, cap)
        .exclude(pk=besides)
        .order_by("created", "pk")
        .values_list("pk", flat=True)[:1]
    )
    if not oldest:
        return 0
    manager = tasks.model.objects.using(tasks.db)
    record = error_record(
        SHED,
        f"Cancelled to make room in the {cap.scope} (max_ready {cap.max_ready}).",
        {"scope": cap.scope, "max_ready": cap.max_ready},
    )
    with transaction.atomic(using=tasks.db):
        for pk, errors in manager.filter(pk__in=oldest, status=Status.READY).values_list(
            "pk", "errors"
        ):
            manager.filter(pk=pk, status=Status.READY).update(errors=[*(errors or []), record])
        return int(manager.filter(pk__in=oldest).cancel())


def record_origin(tasks: QuerySet[Any], task: Any, admission: Admission) -> None:
    """Write the origin row of the new `task`, if there is something to record."""
    if getattr(task, "submit_outcome", "inserted") != "inserted":
        return
    row = origin_row(task.pk, admission.submitter, admission.key)
    if row is not None:
        row.save(force_insert=True, using=tasks.db)


def record_origins(tasks: QuerySet[Any], rns: set[str], submitter: Submitter) -> None:
    """Write the origin rows of the new tasks `rns` of a bulk submission by `submitter`."""
    from .origins import TaskOrigin

    listed = sorted(rns)
    manager = tasks.model.objects.using(tasks.db)
    for start in range(0, len(listed), 1000):
        ids = manager.filter(rn__in=listed[start : start + 1000]).values_list("pk", flat=True)
        TaskOrigin.objects.using(tasks.db).bulk_create(
            [row for pk in ids if (row := origin_row(pk, submitter, None)) is not None]
        )
