"""Keys taken by the lease: the key rows (`Key`) and the limits (`Limit`), the options of a
submission that name them (`key_values`), and who holds a key (`holders`).

The lease takes a task's keys in its own statement, through the task table's trigger
(`db.keys`); the holders of a key are the running tasks that name it, so every transition out
of running frees them in its own commit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ValidationError
from django.db import NotSupportedError, connections, models
from django.db.models import OuterRef, Q, QuerySet, Subquery

from .. import db
from ..conf import scylla_settings
from ..db import Now
from ..text import RATE_PATTERN as RATE_PATTERN  # the API's schema shows it
from ..text import RateError, rate_parts
from ..validation import (
    KEY_NAME_MAX_LENGTH,
    LOCK_MODES,
    key_name,
    key_ref,
    limit_names,
    order_block,
    validate_locks,
)


class Key(models.Model):
    """One key named by a submitted task ("L:invoice:7", "C:stripe"; a shared lock's row is
    its lock's): the row its takers lock, one after another, to decide."""

    name = models.CharField(primary_key=True, max_length=KEY_NAME_MAX_LENGTH + 2)
    # A rate's key: its last `count` starts, in seconds on the database clock.
    starts = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = db.keys.KEY_TABLE

    def __str__(self) -> str:
        return self.name


class Limit(models.Model):
    """A limit: at most `max_running` running tasks (all workers) hold one of its slots.

    Made from `SCYLLA["LIMITS"]` on first use, or at runtime (the admin, the API), editable
    afterwards. `setting` is the size the settings gave it when they last set it: the monitor
    sets the limit again when the settings give another (`key_control.apply_settings`), so a
    change made at runtime holds until the settings change."""

    name = models.CharField(primary_key=True, max_length=KEY_NAME_MAX_LENGTH)
    max_running = models.PositiveIntegerField()
    setting = models.PositiveIntegerField(null=True, blank=True, editable=False)

    class Meta:
        db_table = db.keys.LIMIT_TABLE

    def __str__(self) -> str:
        return f"{self.name} ({self.max_running})"


class Rate(models.Model):
    """A rate: at most `count` tasks naming it start in any `seconds` (all workers).

    Made from `SCYLLA["RATES"]` ("100/m") on first use, or at runtime, editable afterwards;
    `setting` is the rate the settings gave it when they last set it (as `Limit.setting`)."""

    name = models.CharField(primary_key=True, max_length=KEY_NAME_MAX_LENGTH)
    count = models.PositiveIntegerField()
    seconds = models.FloatField()
    setting = models.CharField(max_length=40, null=True, blank=True, editable=False)  # noqa: DJ001

    class Meta:
        db_table = db.keys.RATE_TABLE

    def __str__(self) -> str:
        return f"{self.name} ({self.count}/{self.seconds:g}s)"


class Hold(models.Model):
    """A lock held by code outside tasks (`scylla_django.lock()`): its id is the holder's
    token. Live until released, or until `until` (seconds on the database clock) passes."""

    key = models.CharField(max_length=KEY_NAME_MAX_LENGTH + 2, db_index=True)
    exclusive = models.BooleanField(default=True)
    until = models.FloatField(null=True, blank=True)
    # When it was taken, on the database clock (for operators).
    since = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        db_table = db.keys.HOLD_TABLE

    def __str__(self) -> str:
        return f"{self.key} (hold {self.pk})"


class LockNotFree(Exception):
    """`scylla_django.lock()` gave up: the lock stayed held by a task or another holder."""


def acquire_lock(
    name: str, *, shared: bool = False, ttl: float | None = None, using: str | None = None
) -> int | None:
    """Hold lock `name` if it is free now: the hold's token, or None. `ttl` seconds (None:
    until released or force-released). ValidationError for a bad name or ttl."""
    key_name(name, "lock")
    if ttl is not None and (not isinstance(ttl, (int, float)) or ttl <= 0):
        raise ValidationError("ttl is a positive number of seconds, or None.", code="invalid_ttl")
    alias = using or "default"
    if not db.keys.takes_keys(connections[alias]):
        raise unsupported()
    ensure_keys(["L:" + name], alias)
    with db.write_atomic(alias):
        return db.keys.take_lock(connections[alias], "L:" + name, not shared, ttl)


def release_lock(token: int, using: str | None = None) -> bool:
    """Give back the hold `token`; False if it was not held (released, or force-released)."""
    deleted, _ = Hold.objects.using(using).filter(pk=token).delete()
    return deleted > 0


def force_release_lock(name: str, using: str | None = None) -> int:
    """Drop every hold of lock `name` (an operator's release); the number dropped."""
    deleted, _ = Hold.objects.using(using).filter(key="L:" + name).delete()
    return deleted


@contextmanager
def lock(
    name: str,
    *,
    shared: bool = False,
    ttl: float | None = 60,
    wait: float = 10.0,
    using: str | None = None,
) -> Iterator[int]:
    """Hold lock `name` (the locks tasks take with `locks=`) around a block of code outside
    tasks; yields the hold's token. Tries again with backoff for up to `wait` seconds, then
    raises LockNotFree. With `ttl` the hold ends by itself after that many seconds on the
    database clock; None holds it until the block ends or an operator force-releases it."""
    deadline = time.monotonic() + wait
    pause = 0.01
    while (token := acquire_lock(name, shared=shared, ttl=ttl, using=using)) is None:
        if time.monotonic() >= deadline:
            raise LockNotFree(f"Lock {name!r} stayed held for {wait:g}s.")
        time.sleep(pause)
        pause = min(pause * 2, 0.5)
    try:
        yield token
    finally:
        release_lock(token, using)


def parse_rate(value: object) -> tuple[int, float]:
    """`(count, seconds)` of a rate written "<count>/<period>", the period a unit (s, m, h, d)
    with an optional number before it ("100/m", "5/10s"). ValidationError otherwise."""
    try:
        return rate_parts(value)
    except RateError as exc:
        raise ValidationError(str(exc), code="invalid_rate") from None


def validate_limits(limits: object, using: str | None = None) -> list[str]:
    """The key elements of `limits`: names of configured limits (`SCYLLA["LIMITS"]`, a
    member of a key family with a default there, or a Limit row). Writes nothing."""
    names = limit_names(limits)
    configured = scylla_settings.LIMITS
    families = scylla_settings.LIMIT_FAMILIES
    unknown = [n for n in names if n not in configured and family_of(n, families) is None]
    known = set(Limit.objects.using(using).filter(name__in=unknown).values_list("name", flat=True))
    for name in unknown:
        if name not in known:
            raise ValidationError(f"Unknown limit {name!r}.", code="unknown_limit")
    return ["C:" + name for name in names]


def family_of(name: str, families: Mapping[str, Any]) -> str | None:
    """The key family of `families` that key name `name` ("tenant:42") is a member of, or
    None."""
    family, colon, member = name.partition(":")
    return family if colon and member and family in families else None


def limit_size(name: str) -> int | None:
    """The size `SCYLLA["LIMITS"]` gives limit `name`: its own, else its key family's
    default; None if neither."""
    configured = scylla_settings.LIMITS
    if name in configured:
        return configured[name]
    families = scylla_settings.LIMIT_FAMILIES
    family = family_of(name, families)
    return None if family is None else families[family]


def configured_rate(name: str) -> str | None:
    """The rate `SCYLLA["RATES"]` gives rate `name` ("100/m"): its own, else its key family's
    default; None if neither."""
    rates = scylla_settings.RATES
    if name in rates:
        return rates[name]
    families = scylla_settings.RATE_FAMILIES
    family = family_of(name, families)
    return None if family is None else families[family]


def ensure_keys(elements: Sequence[str], using: str | None = None) -> None:
    """Make the key rows of `elements` that do not exist yet, and the Limit rows of their
    limits from the settings, in name order (a row that exists is neither locked nor waited
    for). Before the task is inserted: the lease finds a task's key rows made."""
    rows = {"L:" + e[2:] if e.startswith("S:") else e for e in elements}
    Key.objects.using(using).bulk_create(
        [Key(name=name) for name in sorted(rows)], ignore_conflicts=True
    )
    # A limit or rate of the settings, a key family's member included, gets its row here, by
    # an insert that gives way to a row made meanwhile: the lease reads the row it finds.
    sizes = {e[2:]: limit_size(e[2:]) for e in sorted(elements) if e.startswith("C:")}
    Limit.objects.using(using).bulk_create(
        [settings_limit(name, size) for name, size in sizes.items() if size is not None],
        ignore_conflicts=True,
    )
    rates = {e[2:]: configured_rate(e[2:]) for e in sorted(elements) if e.startswith("R:")}
    made = [settings_rate(name, rate) for name, rate in rates.items() if rate is not None]
    Rate.objects.using(using).bulk_create(made, ignore_conflicts=True)


def settings_limit(name: str, size: int) -> Limit:
    """A new limit as `SCYLLA["LIMITS"]` gives it (its `setting` the same size)."""
    return Limit(name=name, max_running=size, setting=size)


def settings_rate(name: str, rate: str) -> Rate:
    """A new rate as `SCYLLA["RATES"]` gives it (its `setting` the rate as written there)."""
    count, seconds = parse_rate(rate)
    return Rate(name=name, count=count, seconds=seconds, setting=rate_text(count, seconds))


def rate_text(count: int, seconds: float) -> str:
    """`count` per `seconds`, written with the largest unit that divides it ("100/m")."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and (seconds / size).is_integer():
            number = int(seconds / size)
            return f"{count}/{'' if number == 1 else number}{unit}"
    return f"{count}/{seconds:g}s"


#: The most a task's start may cost against its rate (`rate_key=(name, {"cost": n})`).
MAX_RATE_COST = 1_000_000


def rate_parts_of(rate_key: object) -> tuple[object, int | None]:
    """The rate named by `rate_key` and the cost of a start (None: 1): a name, a key family's
    member `(family, member)`, or either with its options, `(name, {"cost": n})`."""
    if isinstance(rate_key, (tuple, list)) and len(rate_key) == 2 and isinstance(rate_key[1], dict):
        options = rate_key[1]
        if set(options) - {"cost"}:
            raise ValidationError('A rate_key\'s options are {"cost": n}.', code="invalid_key")
        cost = options.get("cost", 1)
        if isinstance(cost, bool) or not isinstance(cost, int) or not 1 <= cost <= MAX_RATE_COST:
            raise ValidationError(
                f"A rate_key's cost is an integer from 1 to {MAX_RATE_COST}.", code="invalid_cost"
            )
        return rate_key[0], None if cost == 1 else cost
    return rate_key, None


def validate_rate(rate_key: object, using: str | None = None) -> str:
    """The key element of `rate_key` (a name or a key family's member; see `rate_parts_of`
    for its cost): a configured rate (`SCYLLA["RATES"]`, its own or its family's default,
    whose value must parse, or a Rate row). Writes nothing."""
    name = key_ref(rate_parts_of(rate_key)[0], "rate_key")
    if Rate.objects.using(using).filter(name=name).exists():
        return "R:" + name
    configured = configured_rate(name)
    if configured is None:
        raise ValidationError(f"Unknown rate {name!r}.", code="unknown_rate")
    parse_rate(configured)
    return "R:" + name


def unsupported() -> NotSupportedError:
    """The refusal of keys on a database without the key triggers (MySQL/MariaDB)."""
    return NotSupportedError(
        "Locks, limits, order keys and rates need the key triggers of PostgreSQL or SQLite, "
        "which this database (MySQL/MariaDB) lacks; submit without them."
    )


def key_values(
    locks: object,
    limits: object,
    order_key: object = None,
    order_on_failure: object = None,
    rate_key: object = None,
    using: str | None = None,
) -> dict[str, Any]:
    """The key fields of a new task from its `locks`, `limits`, `order_key` (with
    `order_on_failure`, "block" by default) and `rate_key`. Raises ValidationError naming
    the field; NotSupportedError on a database without the key trigger. Makes the key rows,
    limits and rates that are missing."""
    elements: list[str] = []
    errors: dict[str, ValidationError] = {}
    values: dict[str, Any] = {}
    for name, value, check in (("locks", locks, validate_locks), ("limits", limits, None)):
        if value is None:
            continue
        try:
            elements += validate_locks(value) if check else validate_limits(value, using)
        except ValidationError as exc:
            errors[name] = exc
    if order_key is not None:
        try:
            values["order_key"] = key_ref(order_key, "order_key")
            elements.append("O:" + values["order_key"])
        except ValidationError as exc:
            errors["order_key"] = exc
        try:
            values["order_block"] = order_block(order_on_failure)
        except ValidationError as exc:
            errors["order_on_failure"] = exc
    elif order_on_failure is not None:
        errors["order_on_failure"] = ValidationError("No order_key.", code="invalid_key")
    if rate_key is not None:
        try:
            elements.append(validate_rate(rate_key, using))
            cost = rate_parts_of(rate_key)[1]
            if cost is not None:
                values["rate_cost"] = cost
        except ValidationError as exc:
            errors["rate_key"] = exc
    if errors:
        raise ValidationError(errors)
    if not elements:
        return {}
    if not db.keys.takes_keys(connections[using or "default"]):
        raise unsupported()
    ensure_keys(elements, using)
    return {"keys": sorted(elements), **values}


def described(task: Any) -> dict[str, Any]:
    """The keys of `task` as a submission names them: `locks` (`[name, mode]` pairs), `limits`,
    `order_key`, `order_on_failure` (null without an order key) and `rate_key` (or null)."""
    elements = task.keys or []
    modes = {prefix: mode for mode, prefix in LOCK_MODES.items()}
    return {
        "locks": [[e[2:], modes[e[:2]]] for e in elements if e[:2] in modes],
        "limits": [e[2:] for e in elements if e.startswith("C:")],
        "order_key": task.order_key,
        "order_on_failure": (
            None if task.order_key is None else "block" if task.order_block else "continue"
        ),
        "rate_key": next((e[2:] for e in elements if e.startswith("R:")), None),
    }


#: The key elements a key name may stand for in a task's `keys`: what `?key=` matches.
KEY_KINDS = ("L:", "S:", "C:", "O:", "R:")


def naming(tasks: QuerySet[Any], name: str) -> QuerySet[Any]:
    """The tasks of `tasks` that name key `name` in any way: a lock (either mode), a limit,
    an order key, a rate or a unique key."""
    match = Q(unique_key=name) | Q(order_key=name)
    for kind in KEY_KINDS:
        match |= db.json_list_contains(tasks.model, "keys", kind + name, tasks.db)
    return tasks.filter(match)


def holders(tasks: QuerySet[Any], element: str) -> QuerySet[Any]:
    """The running tasks of `tasks` that hold key element `element` ("L:invoice:7" is held by
    exclusive and shared holders of the lock, "S:ledger" by exclusive ones, "C:stripe" by the
    limit's slot holders)."""
    kind, name = element[:2], element[2:]
    wanted = {"L:": ["L:", "S:"], "S:": ["L:"], "C:": ["C:"]}[kind]
    match = Q()
    for prefix in wanted:
        match |= db.json_list_contains(tasks.model, "keys", prefix + name, tasks.db)
    return tasks.filter(match, status="running", keys__isnull=False)


#: The most parents a `parents` reason names.
PARENTS_NAMED = 10


def load_reasons(queue: str, using: str) -> list[dict[str, Any]]:
    """`load_high`, when every alive or silent worker that leases from `queue` leases nothing
    because its host's load is over its `--max-load` (as each last recorded it)."""
    from ..enums import Liveness
    from .processes import WORKER_PREFIX, Worker

    rows = (
        Worker.objects.using(using)
        .in_state(Liveness.ALIVE, Liveness.SILENT)
        .values_list("pk", "queues", "overload", "max_load")
    )
    serving = [row for row in rows if isinstance(row[1], list) and queue in row[1]]
    if not serving or any(overload is None for _, _, overload, _ in serving):
        return []
    workers = [
        {"name": f"{WORKER_PREFIX}{pk}", "load": overload, "max_load": max_load}
        for pk, _, overload, max_load in serving
    ]
    said = ", ".join(f"{w['name']} {w['load']:.2f} > {w['max_load']:g}" for w in workers)
    return [
        {
            "code": "load_high",
            "workers": workers,
            "detail": f"every worker of queue {queue} leases nothing: host load over its "
            f"--max-load ({said})",
        }
    ]


def _paused_reason(task: Any) -> dict[str, Any]:
    """The reason of a task an operator paused: who paused it, since when."""
    from .task_pauses import pause_of

    kept = pause_of(task)
    by = kept.by if kept is not None else None
    since = kept.since if kept is not None else None
    return {
        "code": "paused",
        "by": by,
        "since": since.isoformat() if since is not None else None,
        "not_before": kept.not_before.isoformat() if kept and kept.not_before else None,
        "detail": f"paused by {by or 'an operator'} since {since}; resume it to let it run",
    }


def _parents_reason(task: Any, tasks: QuerySet[Any]) -> dict[str, Any]:
    """The `parents` reason of the held follow-up `task`: the parents it still waits for
    (those not completed; a purged one shows as `purged`), the first `PARENTS_NAMED` named."""
    from .dependencies import Dependency

    pending = (
        Dependency.objects.using(tasks.db)
        .filter(child_id=task.pk)
        .annotate(status=Subquery(tasks.filter(pk=OuterRef("parent_id")).values("status")[:1]))
        .filter(Q(status__isnull=True) | ~Q(status="completed"))
    )
    count = pending.count()
    named = [
        {"rn": rn, "status": status or "purged"}
        for rn, status in pending.order_by("pk").values_list("parent_rn", "status")[:PARENTS_NAMED]
    ]
    if not count:
        detail = "its parents completed: the monitor's next pass releases it"
    else:
        listed = ", ".join(f"{p['rn']} ({p['status']})" for p in named)
        more = f" and {count - len(named)} more" if count > len(named) else ""
        detail = f"waits for its parents to complete: {listed}{more}"
    return {"code": "parents", "parents": named, "pending": count, "detail": detail}


def waiting_reasons(task: Any) -> list[dict[str, Any]]:
    """Why the ready `task` is not running now, read on the database (advisory: it may change
    the next moment), each reason `{"code", "key", "detail", ...}`: `not_before`, `parents` (a
    follow-up: `parents`, the first `PARENTS_NAMED` it still waits for as `{rn, status}`, and
    `pending`, how many it waits for), `queue_paused`, `queue_full` (`running`/`max_running`
    of the queue's limit), `unserved` (no alive or silent worker leases from its queue),
    `load_high` (every live worker of its queue leases nothing: its host's load is over its
    `--max-load`; `workers`: `{name, load, max_load}` each),
    `held` (on an operator's hold: `by`, `since`, and `not_before`, its own, back on release),
    `lock_held` (`holders`: rns, and `holds`), `limit_full` (`running`/`max_running`),
    `order_waits` (`for`: the rn of the earlier task), `rate_exhausted` (`until`), `waiting`
    (a durable sleep or wait: `wait`, its name, `kind` and `until`, its timeout). Empty for a
    task that is not ready, or may run now."""
    from .dependencies import AFTER_PARENTS
    from .queues import QueueSetting
    from .serving import live_worker_queues
    from .task_pauses import PAUSED
    from .waits import open_wait

    if task.status != "ready":
        return []
    using = task._state.db or "default"
    tasks = type(task)._default_manager.using(using)
    now = db.read_clock(using)
    reasons: list[dict[str, Any]] = []
    parked = open_wait(task) if task.not_before is not None and task.not_before > now else None
    if task.not_before == AFTER_PARENTS:
        reasons.append(_parents_reason(task, tasks))
    elif task.not_before == PAUSED:
        reasons.append(_paused_reason(task))
    elif parked is not None:
        reasons.append(
            {
                "code": "waiting",
                "wait": parked.name,
                "kind": parked.kind,
                "until": None if parked.timeout is None else parked.timeout.isoformat(),
                "detail": f"wait {parked.name}: {parked.describe()}",
            }
        )
    elif task.not_before is not None and task.not_before > now:
        reasons.append({"code": "not_before", "detail": f"not before {task.not_before}"})
    setting = QueueSetting.objects.using(using).filter(queue=task.queue).first()
    if setting is not None and setting.paused:
        reasons.append({"code": "queue_paused", "detail": f"queue {task.queue} is paused"})
    if setting is not None and setting.max_running is not None:
        n = tasks.filter(queue=task.queue, status="running").count()
        if n >= setting.max_running:
            reasons.append(
                {
                    "code": "queue_full",
                    "running": n,
                    "max_running": setting.max_running,
                    "detail": f"queue {task.queue} full {n}/{setting.max_running} (its limit)",
                }
            )
    if task.queue not in live_worker_queues(using, max_age=0):
        reasons.append({"code": "unserved", "detail": f"no live worker serves queue {task.queue}"})
    else:
        reasons.extend(load_reasons(task.queue, using))
    epoch = now.timestamp()
    for element in task.keys or []:
        kind, name = element[:2], element[2:]
        if kind in ("L:", "S:"):
            running = holders(tasks.exclude(pk=task.pk), element)
            rns = list(running.values_list("rn", flat=True)[:10])
            live = Hold.objects.using(using).filter(
                Q(until__isnull=True) | Q(until__gt=epoch), key="L:" + name
            )
            if kind == "S:":
                live = live.filter(exclusive=True)
            holds = list(live.values_list("pk", flat=True)[:10])
            if rns or holds:
                who = ", ".join(rns + [f"hold {h}" for h in holds])
                reasons.append(
                    {
                        "code": "lock_held",
                        "key": name,
                        "holders": rns,
                        "holds": holds,
                        "detail": f"lock {name} held by {who}",
                    }
                )
        elif kind == "C:":
            size = (
                Limit.objects.using(using)
                .filter(name=name)
                .values_list("max_running", flat=True)
                .first()
            )
            n = holders(tasks, element).count()
            if size is None or n >= size:
                reasons.append(
                    {
                        "code": "limit_full",
                        "key": name,
                        "running": n,
                        "max_running": size,
                        "detail": f"limit {name} full {n}/{size}",
                    }
                )
        elif kind == "O:":
            seq = task.order_seq or task.pk
            earlier = [
                (rn, status)
                for rn, status, pk, place, block, retried in tasks.filter(
                    order_key=name, status__in=["ready", "running", "aborted"]
                )
                .exclude(pk=task.pk)
                .values_list("rn", "status", "pk", "order_seq", "order_block", "retry_of")
                if status == "running"
                or ((place or pk) < seq and status == "ready")
                or (
                    (place or pk) < seq
                    and status == "aborted"
                    and block
                    and not tasks.filter(retry_of=rn).exists()
                )
            ]
            if earlier:
                rn, status = earlier[0]
                reasons.append(
                    {
                        "code": "order_waits",
                        "key": name,
                        "for": rn,
                        "detail": f"order key {name} waits for {rn} ({status})",
                    }
                )
        elif kind == "R:":
            rate = Rate.objects.using(using).filter(name=name).first()
            row = Key.objects.using(using).filter(name=element).first()
            starts = sorted(
                s for s in (row.starts if row else []) if s > epoch - (rate.seconds if rate else 0)
            )
            if rate is None or len(starts) >= rate.count:
                until = None if rate is None else starts[len(starts) - rate.count] + rate.seconds
                reasons.append(
                    {
                        "code": "rate_exhausted",
                        "key": name,
                        "until": until,
                        "detail": f"rate {name} exhausted until {until}",
                    }
                )
    return reasons
