"""What an operator sees of the keys and does to them: the locks held now (by running tasks and
by holds), the limits and rates with their current use, and the operations that change them —
set a limit or a rate, force-release a hold, release an order key that a task aborted for good
holds (README, "Locks, limits and order keys", "REST API", "Admin").

Every operation is one conditional write (with its History row, for a task); every reading is
advisory, taken on the database when asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Exists, Max, OuterRef, Q, QuerySet

from .. import db
from ..conf import scylla_settings
from ..db import Now
from ..enums import EventType, Status
from ..exceptions import InvalidTransition, TaskNotFound
from ..validation import LOCK_MODES, key_name
from .history import History
from .keys import Hold, Key, Limit, Rate, parse_rate

#: The largest limit an operator may set (a limit above any real concurrency is no limit).
MAX_LIMIT = 1_000_000


@dataclass(frozen=True)
class LockHeld:
    """A lock held now: by a running task (`holder`, its rn) or by a hold (`hold`, its token),
    in `mode`, since when, and until when (the task's lease deadline, or the hold's TTL)."""

    key: str
    mode: str
    holder: str | None
    hold: int | None
    since: datetime | None
    expires: datetime | None


@dataclass(frozen=True)
class LimitUse:
    """A limit: its size and how many running tasks hold one of its slots now."""

    name: str
    max_running: int
    running: int
    configured: bool  # in SCYLLA["LIMITS"] (a row or not yet)


@dataclass(frozen=True)
class RateUse:
    """A rate: at most `count` starts in any `seconds`, and the starts within the last
    `seconds` now."""

    name: str
    count: int
    seconds: float
    starts: int
    configured: bool

    @property
    def text(self) -> str:
        """The rate as `SCYLLA["RATES"]` writes it: "100/m", "5/10s"."""
        return rate_text(self.count, self.seconds)


def rate_text(count: int, seconds: float) -> str:
    """`count` per `seconds`, written with the largest unit that divides it ("100/m")."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and (seconds / size).is_integer():
            number = int(seconds / size)
            return f"{count}/{'' if number == 1 else number}{unit}"
    return f"{count}/{seconds:g}s"


def instant(seconds: float | None) -> datetime | None:
    """Seconds on the database clock (as holds and rate starts keep them), as a datetime."""
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _running_keys(tasks: QuerySet[Any]) -> list[tuple[str, list[str], datetime | None, int]]:
    """(rn, keys, deadline, pk) of every running task of `tasks` with keys: one query, through
    the running-keys index."""
    rows = tasks.filter(status=Status.RUNNING, keys__isnull=False).values_list(
        "rn", "keys", "deadline", "pk"
    )
    return [(rn, keys or [], deadline, pk) for rn, keys, deadline, pk in rows]


def held_locks(tasks: QuerySet[Any]) -> list[LockHeld]:
    """Every lock held now, by key: the running tasks of `tasks` (`Task.objects`) that name it
    (since their last lease) and the live holds (since they were taken). Three queries."""
    using = tasks.db
    running = _running_keys(tasks)
    leased = dict(
        History.objects.using(using)
        .filter(task_id__in=[pk for *_, pk in running], typ=EventType.ASSIGNMENT)
        .values("task_id")
        .annotate(at=Max("time"))
        .values_list("task_id", "at")
    )
    modes = {prefix: mode for mode, prefix in LOCK_MODES.items()}
    held = [
        LockHeld(element[2:], modes[element[:2]], rn, None, leased.get(pk), deadline)
        for rn, keys, deadline, pk in running
        for element in keys
        if element[:2] in modes
    ]
    now = db.read_clock(using).timestamp()
    for hold in Hold.objects.using(using).filter(Q(until__isnull=True) | Q(until__gt=now)):
        mode = "exclusive" if hold.exclusive else "shared"
        held.append(LockHeld(hold.key[2:], mode, None, hold.pk, hold.since, instant(hold.until)))
    return sorted(held, key=lambda lock: (lock.key, lock.holder or "", lock.hold or 0))


def limit_use(tasks: QuerySet[Any]) -> list[LimitUse]:
    """Every limit (a row, or configured in `SCYLLA["LIMITS"]` and not used yet), by name,
    with the running tasks of `tasks` (`Task.objects`) that hold a slot. Two queries."""
    using = tasks.db
    configured = scylla_settings.LIMITS
    sizes = dict(configured)
    sizes.update(Limit.objects.using(using).values_list("name", "max_running"))
    running: dict[str, int] = {}
    for _, keys, _, _ in _running_keys(tasks):
        for element in keys:
            if element.startswith("C:"):
                running[element[2:]] = running.get(element[2:], 0) + 1
    return [
        LimitUse(name, size, running.get(name, 0), name in configured)
        for name, size in sorted(sizes.items())
    ]


def rate_use(using: str | None = None) -> list[RateUse]:
    """Every rate (a row, or configured in `SCYLLA["RATES"]`), by name, with its starts within
    its period now. Three queries."""
    configured = scylla_settings.RATES
    rates = {name: parse_rate(text) for name, text in configured.items()}
    rates.update((r.name, (r.count, r.seconds)) for r in Rate.objects.using(using))
    starts = dict(
        Key.objects.using(using)
        .filter(name__in=["R:" + name for name in rates])
        .values_list("name", "starts")
    )
    now = db.read_clock(using or "default").timestamp()
    return [
        RateUse(
            name,
            count,
            seconds,
            sum(1 for s in starts.get("R:" + name) or [] if s > now - seconds),
            name in configured,
        )
        for name, (count, seconds) in sorted(rates.items())
    ]


def validate_limit_size(value: object) -> int:
    """A limit's `max_running`: an integer from 1 to MAX_LIMIT."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise ValidationError(
            f"max_running is an integer from 1 to {MAX_LIMIT}.", code="invalid_limit"
        )
    return value


def set_limit(name: object, max_running: object, using: str | None = None) -> Limit:
    """Make limit `name` (new or not) allow `max_running` running tasks: one UPDATE of an
    existing limit (else an insert). The next lease uses it; running tasks keep their
    slots."""
    limit = Limit(name=key_name(name, "limits"), max_running=validate_limit_size(max_running))
    _upsert(Limit.objects.using(using), limit, max_running=limit.max_running)
    return limit


def _upsert(rows: QuerySet[Any], row: Any, **values: Any) -> None:
    """Set `values` on the row named `row.name`, inserting `row` first if there is none (an
    insert that finds one made meanwhile gives way to it, and the update follows)."""
    if rows.filter(name=row.name).update(**values):
        return
    rows.bulk_create([row], ignore_conflicts=True)
    rows.filter(name=row.name).update(**values)


def set_rate(name: object, rate: object, using: str | None = None) -> Rate:
    """Make rate `name` (new or not) allow `rate` ("100/m") starts: one UPDATE of an existing
    rate (else an insert). Starts already made count against the new rate."""
    count, seconds = parse_rate(rate)
    made = Rate(name=key_name(name, "rate_key"), count=count, seconds=seconds)
    _upsert(Rate.objects.using(using), made, count=count, seconds=seconds)
    return made


def force_release_hold(token: int, using: str | None = None) -> bool:
    """Drop hold `token` whoever holds it (an operator's release): one DELETE; False if it was
    not held. Its holder's own release then finds nothing."""
    deleted, _ = Hold.objects.using(using).filter(pk=token).delete()
    return deleted > 0


def release_order(task: Any, using: str | None = None) -> None:
    """Let the tasks after `task` in its order key run: `task` aborted for good and holds the
    key (`order_on_failure="block"`). One conditional write (aborted, holding the key, not
    retried), with a TaskOrderRelease row in the same transaction. InvalidTransition for a
    task that holds no order key (another status, `continue`, released, or retried: a retry
    holds its place instead); TaskNotFound if it is gone."""
    alias = using or task._state.db or "default"
    tasks = type(task)._default_manager.using(alias)
    retried = Exists(tasks.filter(retry_of=OuterRef("rn")))
    fenced = tasks.filter(~retried, pk=task.pk, status=Status.ABORTED, order_block=True)
    with db.write_atomic(alias):
        if not fenced.update(order_block=False, updated=Now()):
            current = tasks.filter(pk=task.pk).values("status").first()
            if current is None:
                raise TaskNotFound(f"No task has rn {task.rn!r}.", rn=task.rn)
            raise InvalidTransition(
                f"Task {task.rn} holds no order key: it is {current['status']}, and only a "
                "task that aborted for good with order_on_failure='block' (not retried) does.",
                rn=task.rn,
                status=current["status"],
            )
        History.objects.using(alias).create(task_id=task.pk, typ=EventType.ORDER_RELEASE)
        task.refresh_from_db(using=alias, fields=["order_block", "updated"])
