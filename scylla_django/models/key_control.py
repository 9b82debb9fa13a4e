"""What an operator sees of the keys and does to them: the locks held now (by running tasks and
by holds), the limits and rates with their current use, and the operations that change them —
set a limit or a rate, force-release a hold, release an order key that a task aborted for good
holds (docs/howto/keys.md, docs/howto/http-api.md, docs/howto/admin.md).

Every operation is one conditional write (with its History row, for a task); every reading is
advisory, taken on the database when asked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
from .keys import (
    Hold,
    Key,
    Limit,
    Rate,
    configured_rate,
    family_of,
    limit_size,
    parse_rate,
    rate_text,
)

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
    configured: bool  # its size is the one SCYLLA["LIMITS"] gives (a row, or none yet)


@dataclass(frozen=True)
class RateUse:
    """A rate: at most `count` starts in any `seconds`, and the starts within the last
    `seconds` now."""

    name: str
    count: int
    seconds: float
    starts: int
    configured: bool  # it is the rate SCYLLA["RATES"] gives (a row, or none yet)

    @property
    def text(self) -> str:
        """The rate as `SCYLLA["RATES"]` writes it: "100/m", "5/10s"."""
        return rate_text(self.count, self.seconds)


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
        LimitUse(name, size, running.get(name, 0), limit_size(name) == size)
        for name, size in sorted(sizes.items())
    ]


def rate_use(using: str | None = None) -> list[RateUse]:
    """Every rate (a row, or configured in `SCYLLA["RATES"]`), by name, with its starts within
    its period now. Three queries."""
    configured = scylla_settings.RATES
    # A bad rate in the settings (`manage.py check` reports it) is shown by its row only.
    parsed = {name: _rate_or_none(text) for name, text in configured.items()}
    rates = {name: rate for name, rate in parsed.items() if rate is not None}
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
            parsed.get(name) == (count, seconds),
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
    slots. It holds until `SCYLLA["LIMITS"]` gives the limit a new size (`apply_settings`):
    a new limit records the size the settings give it now as its `setting`."""
    checked = key_name(name, "limits")
    limit = Limit(
        name=checked,
        max_running=validate_limit_size(max_running),
        setting=limit_size(checked),
    )
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
    rate (else an insert). Starts already made count against the new rate. It holds until
    `SCYLLA["RATES"]` gives the rate a new value, as `set_limit`."""
    count, seconds = parse_rate(rate)
    checked = key_name(name, "rate_key")
    given = configured_rate(checked)
    setting = None if given is None else rate_text(*parse_rate(given))
    made = Rate(name=checked, count=count, seconds=seconds, setting=setting)
    _upsert(Rate.objects.using(using), made, count=count, seconds=seconds)
    return made


@dataclass(frozen=True)
class SettingChange:
    """A limit or rate whose row is not what the settings give: set to it (`applied`), or
    left to another monitor (False: one started later names it too, see `apply_settings`).
    `kind` is "limit" or "rate"; `old` and `new` are the values as the settings write them."""

    kind: str
    name: str
    old: str
    new: str
    applied: bool


def apply_settings(
    limits: Mapping[str, int],
    rates: Mapping[str, str],
    using: str | None = None,
    defer: Callable[[str, str], bool] = lambda setting, name: False,
) -> list[SettingChange]:
    """Set every Limit and Rate row of a name in `limits`/`rates` (`SCYLLA["LIMITS"]`,
    `SCYLLA["RATES"]`) to the settings' value where the settings changed since they last set
    it (the row's `setting` differs): a change made at runtime holds until then, and a row
    of a name the settings lack is never touched. A name for which `defer("LIMITS" or
    "RATES", name)` is true is left as it is (another monitor's settings rule it).

    Two reads, and one conditional UPDATE per row set, fenced on the `setting` it read, so
    that of several monitors with the same settings one sets it (and says so)."""
    # filter(setting=None) is `setting IS NULL`: a row made at runtime before the name was
    # in the settings is fenced as well.
    families = _family_members(
        Limit.objects.using(using), scylla_settings.LIMIT_FAMILIES, limits
    ) | _family_members(Rate.objects.using(using), scylla_settings.RATE_FAMILIES, rates)
    limits = {**families.get("limit", {}), **limits}
    rates = {**families.get("rate", {}), **rates}
    return _apply_limits(limits, using, defer) + _apply_rates(rates, using, defer)


def _family_members(
    rows: QuerySet[Any], families: Mapping[str, Any], named: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """The rows of `rows` (Limit or Rate) that are members of a key family of `families`
    (family: default) and not named in `named`, whose `setting` is not the family's default:
    `{"limit" | "rate": {name: default}}`, to set as a named one is set."""
    kind = "limit" if rows.model is Limit else "rate"
    members: dict[str, Any] = {}
    for family, default in families.items():
        if kind == "rate" and (wanted := _rate_or_none(default)) is not None:
            default_setting: object = rate_text(*wanted)
        else:
            default_setting = default
        found = rows.filter(name__startswith=family + ":").exclude(setting=default_setting)
        for name in found.values_list("name", flat=True):
            if name not in named and family_of(name, families) == family:
                members[name] = default
    return {kind: members} if members else {}


def _apply_limits(
    limits: Mapping[str, int], using: str | None, defer: Callable[[str, str], bool]
) -> list[SettingChange]:
    changes = []
    rows = Limit.objects.using(using)
    for name, size, setting in rows.filter(name__in=sorted(limits)).values_list(
        "name", "max_running", "setting"
    ):
        wanted = limits[name]
        if setting == wanted:
            continue
        if defer("LIMITS", name):
            if size != wanted:
                changes.append(SettingChange("limit", name, str(size), str(wanted), False))
        elif rows.filter(name=name, setting=setting).update(max_running=wanted, setting=wanted):
            changes.append(SettingChange("limit", name, str(size), str(wanted), True))
    return changes


def _apply_rates(
    rates: Mapping[str, str], using: str | None, defer: Callable[[str, str], bool]
) -> list[SettingChange]:
    changes = []
    rows = Rate.objects.using(using)
    for name, count, seconds, setting in rows.filter(name__in=sorted(rates)).values_list(
        "name", "count", "seconds", "setting"
    ):
        wanted = _rate_or_none(rates[name])
        if wanted is None or (setting is not None and _rate_or_none(setting) == wanted):
            continue  # a bad rate in the settings (`manage.py check` reports it), or no change
        old, new = rate_text(count, seconds), rate_text(*wanted)
        if defer("RATES", name):
            if (count, seconds) != wanted:
                changes.append(SettingChange("rate", name, old, new, False))
        elif rows.filter(name=name, setting=setting).update(
            count=wanted[0], seconds=wanted[1], setting=new
        ):
            changes.append(SettingChange("rate", name, old, new, True))
    return changes


def _rate_or_none(text: str) -> tuple[int, float] | None:
    """The rate `text` stands for, or None if it is not one."""
    try:
        return parse_rate(text)
    except ValidationError:
        return None


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
