"""Events: emitting them, matching them, and writing task events from History.

```python
scylla_django.emit("partition.added", {"dataset": "sales", "day": "2026-11-25"})
```

`emit` writes an `Event` row in the caller's transaction: an event emitted in a transaction
that rolls back never existed, and a schedule's trigger (`schedules.triggers`) fires only on
committed events.

Task events (`task.completed`, `task.aborted`, `task.cancelled`, with the payload `{"rn",
"queue", "status", "spec", "result"}`) are not written by the transitions themselves, which
stay as fast as without triggers: every terminal transition already writes its History row in
its own transaction, and the monitor turns those rows into events (`record_task_events`) for
the queues and statuses some trigger listens to. It reads History in id order from a
`Watermark`, one event per History row (a unique column), so a monitor killed mid-way or two
monitors at once neither lose nor duplicate one. Ids are taken at insert and committed in any
order: the watermark moves only over ids it has seen, and over a missing id (a transaction
not yet committed, or rolled back) only once the rows after it are `SETTLE` old.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.db.models import Exists, ExpressionWrapper, F, JSONField, OuterRef, Q, QuerySet
from django.db.models.fields.json import KeyTransform

from .. import db
from ..enums import EventType, Status
from ..models import Consumption, Event, Firing, FiringOutcome, History, Watermark, waits
from ..models.events import KIND_MAX_LENGTH
from ..validation import validate_json

#: The status of a task event by the History event of its transition.
TASK_STATUSES = {
    EventType.COMPLETION: Status.COMPLETED,
    EventType.ABORT: Status.ABORTED,
    EventType.CANCELLATION: Status.CANCELLED,
}
#: The prefix of the kind of a task event: `task.completed`.
TASK_KIND_PREFIX = "task."
#: A missing History id is given up once the rows after it are this old (see the module).
SETTLE = timedelta(minutes=5)
#: History ids read per step of `record_task_events`.
READ_BATCH = 5000
#: The watermark of task events.
TASK_EVENTS = "task-events"

#: What an event kind is made of (the API's schema says it too).
KIND_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]*$"
_KIND = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.:/-]*\Z")
_PATH_PART = re.compile(r"\A[A-Za-z0-9_-]+\Z")
_SCALARS = (str, int, float, bool)


def validate_kind(value: object) -> str:
    """An event kind: letters, digits and `_ . : / -`, at most KIND_MAX_LENGTH characters."""
    if not isinstance(value, str) or not _KIND.match(value) or len(value) > KIND_MAX_LENGTH:
        raise ValidationError(
            f"An event kind is letters, digits and _ . : / - (at most {KIND_MAX_LENGTH}), "
            f"such as partition.added, not {value!r}.",
            code="invalid_kind",
        )
    return value


def validate_payload(value: object) -> dict[str, Any]:
    """An event's payload: a JSON object within the spec size limit."""
    if not isinstance(value, Mapping):
        raise ValidationError("payload must be a JSON object.", code="invalid_payload")
    return dict(validate_json(dict(value), "payload"))


def validate_match(value: object) -> dict[str, Any]:
    """A match on a payload: `{path: value}`, a path being keys joined by dots (`spec.dataset`)
    and a value a string, number or boolean. An event matches when every path has its value."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(
            f'match must be an object such as {{"dataset": "sales"}}, not {value!r}.',
            code="invalid_match",
        )
    for path, wanted in value.items():
        if not isinstance(path, str) or not all(_PATH_PART.match(p) for p in path.split(".")):
            raise ValidationError(
                f"match keys are paths such as dataset or spec.dataset, not {path!r}.",
                code="invalid_match",
            )
        if not isinstance(wanted, _SCALARS):
            raise ValidationError(
                f"match[{path!r}] must be a string, number or boolean, not {wanted!r}.",
                code="invalid_match",
            )
    return dict(value)


def emit(kind: str, payload: Mapping[str, Any] | None = None, using: str | None = None) -> Event:
    """Store an event of `kind` with `payload` in the current transaction; return it. The
    tasks that wait for it (`ctx.wait_for(kind, match=...)`) are woken in that transaction.

    A trigger on `kind` may not exist yet (it is allowed to come later). ValidationError for a
    malformed kind or a payload that is not a JSON object.
    """
    # The time written by the statement, not left to the column's default: a default is bound
    # to the clock functions when the table was made, past the virtual clock of tests.
    event = Event(kind=validate_kind(kind), payload=validate_payload(payload or {}), time=db.Now())
    alias = using or "default"
    with db.write_atomic(alias):
        event.save(using=alias, force_insert=True)
        waits.wake_on_event(event.pk, event.kind, event.payload, alias)
    return event


def match_condition(kind: str, match: Mapping[str, Any], prefix: str = "") -> Q:
    """The condition on an Event of being of `kind` with every value of `match` in its
    payload (paths as in `validate_match`); with `prefix` (`"event__"`), on the event of a
    related row."""
    condition = Q(**{f"{prefix}kind": kind})
    for path, wanted in sorted(match.items()):
        # Typed, so that the lookup prepares `wanted` as JSON before the query resolves it.
        expression: Any = ExpressionWrapper(F(f"{prefix}payload"), output_field=JSONField())
        for part in path.split("."):
            expression = KeyTransform(part, expression)
        # The lookup the JSON key transform registers (JSON equality on every database).
        condition &= Q(expression.get_lookup("exact")(expression, wanted))
    return condition


def matching(
    kind: str, match: Mapping[str, Any], using: str, events: QuerySet[Event] | None = None
) -> QuerySet[Event]:
    """The events of `kind` whose payload has every value of `match`."""
    selected = events if events is not None else Event.objects.using(using)
    return selected.filter(match_condition(kind, match))


def unconsumed(events: QuerySet[Event], schedule_id: int) -> QuerySet[Event]:
    """`events` that no firing of the schedule `schedule_id` has consumed."""
    consumed = Consumption.objects.filter(schedule_id=schedule_id, event_id=OuterRef("pk"))
    return events.filter(~Exists(consumed))


# -- task events --------------------------------------------------------------------------------


def record_task_events(using: str, listened: Collection[tuple[str, str]]) -> int:
    """Write the task events of History rows not yet read, for the (queue, status) pairs in
    `listened`; return how many were written. One monitor at a time reads (the watermark row
    is locked, SKIP LOCKED); an event per History row is unique, so nothing doubles."""
    written = 0
    # A read first, outside a transaction: with no History row past the watermark there is
    # nothing to lock (on SQLite, a write transaction would hold every writer up).
    position = (
        Watermark.objects.using(using)
        .filter(name=TASK_EVENTS)
        .values_list("position", flat=True)
        .first()
    )
    if position is not None and not History.objects.using(using).filter(id__gt=position).exists():
        return 0
    while True:
        with db.write_atomic(using):
            mark = _lock_watermark(using)
            if mark is None:
                return written
            count, moved = _read_task_events(mark, using, listened)
        written += count
        if not moved:
            return written


def _lock_watermark(using: str) -> Watermark | None:
    marks = Watermark.objects.using(using)
    mark = marks.select_for_update(skip_locked=True).filter(name=TASK_EVENTS).first()
    if mark is not None:
        return mark
    if marks.filter(name=TASK_EVENTS).exists():
        return None  # another monitor holds it
    # First run: start at the end of History (tasks that finished before have no events).
    latest = History.objects.using(using).order_by("-id").values_list("id", flat=True).first()
    try:
        with db.write_atomic(using):
            Watermark.objects.using(using).create(name=TASK_EVENTS, position=latest or 0)
    except IntegrityError:
        pass
    return marks.select_for_update(skip_locked=True).filter(name=TASK_EVENTS).first()


def _read_task_events(
    mark: Watermark, using: str, listened: Collection[tuple[str, str]]
) -> tuple[int, bool]:
    """One step: write the events of the next READ_BATCH ids, move the watermark over the ids
    that are settled. Return (events written, whether there may be more to read now)."""
    histories = History.objects.using(using)
    seen = list(
        histories.filter(id__gt=mark.position).order_by("id").values_list("id", "time")[:READ_BATCH]
    )
    if not seen:
        return 0, False
    now = db.read_clock(using)
    position = mark.position
    for pk, time in seen:
        if pk != position + 1 and now - time < SETTLE:
            break  # an id before this one may still commit
        position = pk
    written = 0
    if listened:
        wanted = Q()
        for queue, status in listened:
            typ = next(t for t, s in TASK_STATUSES.items() if s == status)
            wanted |= Q(typ=typ, task__queue=queue)
        written_already = Event.objects.filter(history=OuterRef("pk"))
        rows = (
            histories.filter(id__gt=mark.position, id__lte=seen[-1][0])
            .filter(wanted)
            .filter(~Exists(written_already))
            .values_list(
                "id", "typ", "time", "task__rn", "task__queue", "task__spec", "task__result"
            )
        )
        events = [
            Event(
                kind=TASK_KIND_PREFIX + TASK_STATUSES[EventType(typ)],
                payload={
                    "rn": rn,
                    "queue": queue,
                    "status": str(TASK_STATUSES[EventType(typ)]),
                    "spec": spec,
                    "result": result,
                },
                time=time,
                history=pk,
            )
            for pk, typ, time, rn, queue, spec, result in rows
        ]
        Event.objects.using(using).bulk_create(events, ignore_conflicts=True)
        written = len(events)
    if position != mark.position:
        Watermark.objects.using(using).filter(name=TASK_EVENTS).update(position=position)
    return written, position == seen[-1][0] and len(seen) == READ_BATCH


# -- purge --------------------------------------------------------------------------------------


def purge_events(
    older_than: timedelta,
    listened_kinds: Collection[str],
    using: str,
    watermarks: Mapping[str, int] | None = None,
) -> int:
    """Delete events older than `older_than` that a firing consumed, whose kind no trigger
    listens to, or that no trigger will count (up to `watermarks[kind]`, the lowest event id
    the triggers listening to the kind count after), with their consumptions, then the firings
    left without events (but a delayed one, which waits on); return how many events were
    deleted."""
    cutoff = db.read_clock(using) - older_than
    events = Event.objects.using(using).filter(time__lt=cutoff)
    consumed = Consumption.objects.filter(event_id=OuterRef("pk"))
    gone = Q(Exists(consumed)) | ~Q(kind__in=list(listened_kinds))
    for kind, after in sorted((watermarks or {}).items()):
        gone |= Q(kind=kind, id__lte=after)
    old = events.filter(gone)
    deleted = 0
    while True:
        with db.write_atomic(using):
            pks = list(old.order_by("id").values_list("id", flat=True)[:1000])
            if not pks:
                break
            Consumption.objects.using(using).filter(event_id__in=pks).delete()
            deleted += Event.objects.using(using).filter(id__in=pks).delete()[0]
    left = Consumption.objects.filter(firing_id=OuterRef("pk"))
    firings = Firing.objects.using(using).filter(time__lt=cutoff).filter(~Exists(left))
    firings.exclude(outcome=FiringOutcome.DELAYED).delete()
    return deleted
