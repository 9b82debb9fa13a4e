"""Durable waits: `Wait` (a task's durable sleep, or its wait for an event or a signal) and
`TaskSignal` (a signal sent to a task), with the writes that park a task, wake it and send it
a signal (docs/howto/durable.md; `docs/howto/durable.md`).

A parked task is an ordinary ready task whose `not_before` is its wait's timeout (`PARKED`
without one): the lease skips it as it skips any task not yet due, with no column or
condition of its own, and it holds no worker slot nor connection. Waking it is one
conditional write on its wait (`outcome` null → woken, so a wait is woken once whoever races)
and one on the task (`not_before = now` while it is ready). Every write here first locks the
task's row (the wake and the signal for update, the park through the lease's fence), so a
wake and a park of the same task never interleave.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core import signing
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from .. import db
from ..db import Now
from ..enums import TERMINAL_STATUSES, Status
from ..exceptions import SignalAlreadySent, TaskFinished, TaskNotFound
from ..validation import validate_json
from .steps import CURSOR, NAME_MAX_LENGTH, LeasedTask, Step, validate_name

if TYPE_CHECKING:
    from .processes import Worker

#: The `not_before` of a task parked in a wait without a timeout: not leasable until woken
#: (two days before `AFTER_PARENTS`, the follow-ups' own, and one before `PAUSED`, an
#: operator's pause, so that the three are told apart).
PARKED = datetime(9999, 12, 29, tzinfo=UTC)


class WaitKind(models.TextChoices):
    """What a wait waits for."""

    SLEEP = "sleep", "Time"
    EVENT = "event", "An event"
    SIGNAL = "signal", "A signal"


class WaitOutcome(models.TextChoices):
    """How a wait ended."""

    WOKEN = "woken", "Woken"
    TIMED_OUT = "timed_out", "Timed out"


class Wait(models.Model):
    """A task's durable sleep or wait: parked (ready, `not_before` its `timeout`) until the time
    comes, an event of `event_kind` matching `match` is emitted, or the signal `signal` is
    sent. Open while `outcome` is null; woken once (a conditional write on `outcome`), with
    the event's or the signal's `payload`."""

    id = models.BigAutoField(primary_key=True)
    task = models.ForeignKey(
        "Task", on_delete=models.DO_NOTHING, db_constraint=False, related_name="waits"
    )
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    kind = models.CharField(max_length=6, choices=WaitKind.choices)
    event_kind = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    match = models.JSONField(null=True, blank=True)
    # An event wait's key (`match_key`): the events that may wake it are found by it.
    match_key = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001
    signal = models.CharField(max_length=NAME_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    lease = models.PositiveIntegerField()
    started = models.DateTimeField(db_default=Now())
    # When it times out (a sleep: when it ends); null: never.
    timeout = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(  # noqa: DJ001
        max_length=9, choices=WaitOutcome.choices, null=True, blank=True
    )
    ended = models.DateTimeField(null=True, blank=True)
    payload = models.JSONField(null=True, blank=True)
    event = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["task", "name"], name="scylla_wait_once_per_task")
        ]
        indexes = [
            models.Index(
                fields=["event_kind", "match_key"],
                name="scylla_wait_open_key_idx",
                condition=Q(outcome__isnull=True, kind="event"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_id}:{self.name}"

    def describe(self) -> str:
        """What it waits for, in words."""
        if self.kind == WaitKind.EVENT:
            what = f"event {self.event_kind}" + (f" matching {self.match}" if self.match else "")
        elif self.kind == WaitKind.SIGNAL:
            what = f"signal {self.signal}"
        else:
            return f"sleep until {self.timeout}"
        return what + (f" until {self.timeout}" if self.timeout is not None else "")


class TaskSignal(models.Model):
    """A signal sent to a task (`Task.signal()`): kept for the task until a wait takes it, and
    sent at most once per name (unique)."""

    id = models.BigAutoField(primary_key=True)
    task = models.ForeignKey(
        "Task", on_delete=models.DO_NOTHING, db_constraint=False, related_name="signals"
    )
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    payload = models.JSONField(null=True, blank=True)
    time = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["task", "name"], name="scylla_signal_once_per_task")
        ]

    def __str__(self) -> str:
        return f"{self.task_id}:{self.name}"


@dataclass(frozen=True)
class WaitFor:
    """What a wait waits for: time (`kind` sleep, `duration`), an event (`event_kind`, `match`)
    or a signal (`signal`), with a timeout (`duration`, None: never)."""

    name: str
    kind: str
    duration: timedelta | None = None
    event_kind: str | None = None
    match: Mapping[str, Any] | None = None
    signal: str | None = None


def begin_wait(task: LeasedTask, worker: Worker | str, lease: int, wanted: WaitFor) -> Wait:
    """Start the wait `wanted.name` of `task`, or take it up again on a later run; return it.

    In one transaction fenced on `worker`'s lease `lease`: the wait is read (or written, from
    now on the database clock; a signal sent before is taken at once); one whose timeout has
    passed ends (a sleep woken, a wait timed out); one still open parks the task until its
    timeout (`Task.park`). The returned wait's `outcome` is null when the task was parked:
    the run must then end (`Parked`). LeaseLost or TaskCancelled when the lease is not held.
    """
    validate_name(wanted.name, "wait")
    if wanted.signal is not None:
        validate_name(wanted.signal, "signal")
    using = task._state.db or "default"
    waits = Wait.objects.using(using)
    with db.write_atomic(using):
        task.lock_lease(worker, lease=lease)
        now = db.read_clock(using)
        wait = waits.filter(task_id=task.pk, name=wanted.name).first()
        if wait is None:
            wait = Wait(
                task_id=task.pk,
                name=wanted.name,
                kind=wanted.kind,
                event_kind=wanted.event_kind,
                match=nested_match(wanted.match),
                match_key=None if wanted.event_kind is None else match_key(wanted.match),
                signal=wanted.signal,
                lease=lease,
                started=now,
                timeout=None if wanted.duration is None else now + wanted.duration,
            )
            if wanted.signal is not None:
                sent = TaskSignal.objects.using(using).filter(task_id=task.pk, name=wanted.signal)
                signal = sent.first()
                if signal is not None:
                    wait.outcome, wait.ended, wait.payload = WaitOutcome.WOKEN, now, signal.payload
            wait.save(using=using, force_insert=True)
        elif wait.outcome is None and wait.timeout is not None and wait.timeout <= now:
            ended = WaitOutcome.WOKEN if wait.kind == WaitKind.SLEEP else WaitOutcome.TIMED_OUT
            waits.filter(pk=wait.pk, outcome__isnull=True).update(outcome=ended, ended=now)
            wait.outcome, wait.ended = ended, now
        if wait.outcome is None:
            task.park(worker, wait.timeout or PARKED, lease=lease)
    return wait


def task_model() -> Any:
    """The Task model, as the waits' key names it (this module stands below `task.py`)."""
    return Wait._meta.get_field("task").related_model


def nested_match(match: Mapping[str, Any] | None) -> dict[str, Any]:
    """A match `{path: value}` (paths of keys joined by dots) as the JSON object an event's
    payload contains when it matches: `{"order.id": 7}` is `{"order": {"id": 7}}`. Stored so
    on a wait, as `payload_matches` reads it."""
    nested: dict[str, Any] = {}
    for path, wanted in sorted((match or {}).items()):
        *parents, last = path.split(".")
        level: dict[str, Any] | None = nested
        for part in parents:
            inner = level.setdefault(part, {}) if level is not None else None
            level = inner if isinstance(inner, dict) else None
        if level is None or isinstance(level.get(last), dict):
            raise ValidationError(
                f"match path {path!r} is inside another path's value: no payload matches both.",
                code="invalid_match",
            )
        level[last] = wanted
    return nested


def match_key(match: Mapping[str, Any] | None) -> str:
    """The key an event wait is found by (`Wait.match_key`): one (path, value) pair of its
    `match`, hashed (`pair_key`); "" for a wait that any event of its kind wakes.

    An event reads only the open waits of its kind keyed by one of its payload's pairs
    (`payload_keys`), through an index, and checks each one's whole match: the waits read are
    those sharing the key's pair, not every wait of the kind. The pair is a guess of the value
    fewest waits share (`telling`)."""
    pairs = sorted(flat_pairs(nested_match(match)), key=telling)
    return pair_key(*pairs[0]) if pairs else ""


def telling(pair: tuple[str, str]) -> tuple[int, int, str]:
    """How a match's (path, canonical value) pair ranks as its key, first first: a number
    (an id, most often), then a string, the longest first (a UUID before a word such as
    "paid"), a boolean last (half the waits, at best, share one); then by path."""
    path, value = pair
    rank = 2 if value in ("true", "false") else 1 if value.startswith('"') else 0
    return rank, -len(value), path


def payload_keys(payload: Mapping[str, Any]) -> set[str]:
    """The keys of the waits an event with `payload` may wake: "" and each of its pairs'
    (`match_key`). A wait whose match the payload holds has its key among them: its key's
    pair is one of the payload's, the value written alike (`canonical`)."""
    return {""} | {pair_key(path, value) for path, value in flat_pairs(payload)}


def flat_pairs(document: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(path, value) of each string, number and boolean in the JSON object `document`: the
    keys of nested objects joined by dots, the value as `canonical` writes it (lists and nulls,
    which no match holds, are left out)."""
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flat_pairs(value, path + ".")
        elif isinstance(value, str | int | float):
            yield path, canonical(value)


def canonical(value: str | int | float) -> str:
    """A match value as JSON, one way for each value `payload_matches` holds equal: a whole
    float as the integer (7.0 is 7), a boolean as `true`/`false` (never equal to 1 or 0)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def pair_key(path: str, value: str) -> str:
    """A (path, canonical value) pair in 32 characters: its SHA-256, in hex, cut short (a
    collision would only add a wait for the event to check and leave)."""
    return hashlib.sha256(f"{path}={value}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def payload_matches(payload: Any, match: Mapping[str, Any] | None) -> bool:
    """Whether an event's `payload` holds a wait's `match` (`nested_match`'s object: each
    scalar equal, compared as JSON values are, a boolean being no number)."""
    for key, wanted in (match or {}).items():
        if not isinstance(payload, Mapping) or key not in payload:
            return False
        value = payload[key]
        if isinstance(wanted, Mapping):
            if not payload_matches(value, wanted):
                return False
        elif isinstance(value, bool) != isinstance(wanted, bool) or value != wanted:
            return False
    return True


#: The waits woken per statement by one event (`wake_all`): the ids travel as parameters,
#: and SQLite takes at most 32,766 of them in a statement.
WAKE_CHUNK = 1000


def wake(wait: Wait, payload: Any, using: str, *, event: int | None = None) -> bool:
    """Wake `wait` with `payload`: True if this call woke it (it was open). See `wake_all`."""
    return wake_all([wait], payload, using, event=event) == 1


def wake_all(waits: Sequence[Wait], payload: Any, using: str, *, event: int | None = None) -> int:
    """Wake `waits` with `payload`; return how many this call woke (those still open).

    One transaction (a savepoint in the caller's), a few statements per `WAKE_CHUNK` waits
    however many they are: their tasks' rows locked for update in the order of their keys
    (so two wakers of overlapping waits never deadlock), the waits still open ended (a
    conditional write: every writer of a wait's outcome locks its task's row first, so an
    open wait is ended by one of them only), and their tasks made due now if parked (ready),
    their queues told once."""
    woken = 0
    tasks = task_model()._default_manager.using(using)
    with db.write_atomic(using):
        for start in range(0, len(waits), WAKE_CHUNK):
            chunk = waits[start : start + WAKE_CHUNK]
            locked = tasks.select_for_update().filter(pk__in={w.task_id for w in chunk})
            rows = {
                pk: (queue, status)
                for pk, queue, status in locked.order_by("pk").values_list("pk", "queue", "status")
            }
            still_open = Wait.objects.using(using).filter(
                pk__in=[w.pk for w in chunk], outcome__isnull=True
            )
            opened = dict(still_open.values_list("pk", "task_id"))
            if not opened:
                continue
            woken += (
                Wait.objects.using(using)
                .filter(pk__in=opened, outcome__isnull=True)
                .update(outcome=WaitOutcome.WOKEN, ended=Now(), payload=payload, event=event)
            )
            due = {pk for pk in opened.values() if rows.get(pk, ("", ""))[1] == Status.READY}
            if due:
                tasks.filter(pk__in=due, status=Status.READY).update(not_before=Now())
                db.notify_ready(using, sorted({rows[pk][0] for pk in due}))
    return woken


def wake_on_event(event_id: int, kind: str, payload: Mapping[str, Any], using: str) -> int:
    """Wake the open waits for events of `kind` that `payload` matches, in the emitter's
    transaction; return how many this call woke. A wait sees the events emitted once it is
    committed: an event emitted before the wait began never wakes it. The database reads the
    open waits of the kind keyed by one of the payload's pairs (`payload_keys`, an index's
    range per key), each one's whole match is checked here, and they are woken together
    (`wake_all`), a few statements for all of them."""
    keys = sorted(payload_keys(payload))
    open_waits = Wait.objects.using(using).filter(
        kind=WaitKind.EVENT, event_kind=kind, outcome__isnull=True
    )
    matched = [
        wait
        for start in range(0, len(keys), WAKE_CHUNK)
        for wait in open_waits.filter(match_key__in=keys[start : start + WAKE_CHUNK]).only(
            "id", "task_id", "match"
        )
        if payload_matches(payload, wait.match)
    ]
    return wake_all(matched, dict(payload), using, event=event_id) if matched else 0


def send_signal(task: LeasedTask, name: str, payload: Any = None) -> TaskSignal:
    """`Task.signal()`: keep the signal `name` for `task` and wake its wait for it, if any.

    One transaction: the task's row locked for update (TaskNotFound if it is gone,
    TaskFinished if it is terminal), the signal written once (SignalAlreadySent if one of the
    same name was), and an open wait for it woken with `payload`."""
    validate_name(name, "signal")
    value = validate_json(payload, "payload", allow_null=True)
    using = task._state.db or "default"
    tasks = task_model()._default_manager.using(using)
    with db.write_atomic(using):
        status = tasks.select_for_update().filter(pk=task.pk).values_list("status", flat=True)
        found = status.first()
        if found is None:
            raise TaskNotFound(f"No task {task.rn}.", rn=task.rn)
        if found in TERMINAL_STATUSES:
            raise TaskFinished(
                f"{task.rn} is {found}: a finished task takes no signal.", rn=task.rn, status=found
            )
        signals = TaskSignal.objects.using(using)
        if signals.filter(task_id=task.pk, name=name).exists():
            raise SignalAlreadySent(f"{task.rn} was sent the signal {name!r} already.", rn=task.rn)
        signal = signals.create(task_id=task.pk, name=name, payload=value, time=Now())
        waiting = Wait.objects.using(using).filter(
            task_id=task.pk, kind=WaitKind.SIGNAL, signal=name, outcome__isnull=True
        )
        wake_all(list(waiting), value, using)
    return signal


#: The salt of signal tokens (`signal_token`).
TOKEN_SALT = "scylla_django.signal"


def signal_token(task: LeasedTask, name: str) -> str:
    """A token that sends the signal `name` to `task` without other credentials (`POST
    /api/signals/{token}/`), to hand to an outside system as a completion URL: signed with
    the project's SECRET_KEY (`django.core.signing`), good for one signal, since a task takes
    each signal once."""
    validate_name(name, "signal")
    return signing.dumps([task.rn, name], salt=TOKEN_SALT, compress=False)


def read_signal_token(token: str) -> tuple[str, str]:
    """The (rn, signal name) of a token `signal_token` made; ValidationError `invalid_token`
    for anything else."""
    try:
        rn, name = signing.loads(token, salt=TOKEN_SALT)
    except (signing.BadSignature, TypeError, ValueError) as exc:
        raise ValidationError("This signal token is not valid.", code="invalid_token") from exc
    return str(rn), validate_name(name, "signal")


def carry_over(from_pk: int, to_pk: int, using: str) -> None:
    """Give a retry that resumes (`Retry(resume=True)`) the steps, the cursor and the ended
    waits of the task it follows, in the transaction that submits it."""
    Step.objects.using(using).bulk_create(
        Step(task_id=to_pk, name=s.name, result=s.result, size=s.size, lease=s.lease, time=s.time)
        for s in Step.objects.using(using).filter(task_id=from_pk)
    )
    ended = Wait.objects.using(using).filter(task_id=from_pk, outcome__isnull=False)
    Wait.objects.using(using).bulk_create(
        Wait(
            task_id=to_pk,
            **{
                f.attname: getattr(w, f.attname)
                for f in Wait._meta.concrete_fields
                if f.attname not in ("id", "task_id")
            },
        )
        for w in ended
    )


def durable_record(task: LeasedTask) -> dict[str, Any]:
    """What `task`'s runs recorded: `{"steps", "cursor", "waits", "signals"}` (its steps
    apart from its cursor, in the order they completed; its waits and signals in order)."""
    using = task._state.db or "default"
    steps = list(Step.objects.using(using).filter(task_id=task.pk))
    return {
        "steps": [s for s in steps if s.name != CURSOR],
        "cursor": next((s.result for s in steps if s.name == CURSOR), None),
        "waits": list(Wait.objects.using(using).filter(task_id=task.pk)),
        "signals": list(TaskSignal.objects.using(using).filter(task_id=task.pk)),
    }


def open_wait(task: LeasedTask) -> Wait | None:
    """The wait `task` is parked in, if any (the last one it began, still open)."""
    using = task._state.db or "default"
    waits = Wait.objects.using(using).filter(task_id=task.pk, outcome__isnull=True)
    return waits.order_by("-id").first()
