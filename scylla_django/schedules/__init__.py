"""Recurring schedules: definitions, the next tick, syncing `SCYLLA["SCHEDULES"]`, and ticking.

```python
SCYLLA = {"SCHEDULES": {
    "nightly-report": {"cron": "0 3 * * *", "timezone": "Europe/Malta", "queue": "reports",
                       "spec": {"kind": "daily"}, "priority": 50},
    "sync-iam": {"every": "5m", "queue": "sync", "spec": {}},
}}
```

Each tick is submitted as a new task whose rn is `schedule:<name>:<tick time in UTC>`. Rns are
unique, so however many monitors tick at once, a tick is submitted exactly once; the due rows
are also locked (SKIP LOCKED) so that monitors do not even try the same schedule together.

Cron expressions are evaluated by `cronsim` in the schedule's time zone, with the semantics of
Debian's cron on daylight-saving changes: a job whose time falls in the hour skipped in spring
runs at the end of the gap (02:30 becomes 03:00); in the repeated autumn hour, a job at a fixed
hour runs once (on the first pass), a job on every hour (`*` in the hour field) runs on both
passes. Intervals (`every`) are counted in UTC from the Unix epoch, so DST never moves them.

Every tick goes through `fire()`, which asks the schedule's run constraints
(`schedules.constraints`: window, min_gap, max_runs, max_concurrent) whether it runs now,
waits (held in a `WaitingRun` row, released by a later pass: `release()`) or is skipped.

A schedule with a `trigger` instead of `cron`/`every` fires on events (`schedules.triggers`,
`schedules.firings`); a trigger's firing goes through `fire()` too, under the same lock and
in the same transaction as the events it consumes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
import zoneinfo
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cronsim import CronSim, CronSimError
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, router, transaction
from django.db.models import Q, QuerySet

from .. import db, spec_versions, tracing
from ..conf import scylla_settings
from ..db import Now
from ..models import CatchUp, OnTimeout, Schedule, Task, WaitingRun
from ..models import Monitor as MonitorRecord
from ..models.processes import Peers
from ..models.schedules import watermark
from ..text import DurationError, positive_duration
from ..validation import (
    FieldErrors,
    validate_json,
    validate_priority,
    validate_queue,
    validate_schedule_name,
)
from . import constraints
from .triggers import clean_trigger

#: Most missed ticks submitted in one transaction with `catch_up="all"` (the next one goes on).
MAX_CATCH_UP = 1000
#: Most schedules one transaction of a pass locks and ticks (or releases): a commit per
#: schedule would make a pass over thousands of due schedules as slow as that many commits.
BATCH = 500
#: A tick seen this much later than its time counts as missed (for `catch_up="none"`).
MISSED_AFTER = timedelta(minutes=1)

#: The keys of a schedule besides its name, in the order forms and the API show them.
DEFINITION_KEYS = (
    "cron",
    "every",
    "trigger",
    "timezone",
    "queue",
    "spec",
    "priority",
    "enabled",
    "catch_up",
    "skip_if_running",
    *constraints.CONSTRAINT_KEYS,
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
logger = logging.getLogger("scylla_django")


def parse_every(value: object) -> timedelta:
    """An interval from a timedelta, seconds, or text such as `"30s"`, `"5m"`, `"2h"`, `"1d"`."""
    try:
        interval = positive_duration(value)
    except DurationError:
        raise ValidationError(
            f'every must be a duration such as "30s", "5m", "2h", "1d", not {value!r}.',
            code="invalid_every",
        ) from None
    if interval < timedelta(seconds=1) or interval.microseconds:
        raise ValidationError(
            "every must be whole seconds, at least one second.", code="invalid_every"
        )
    return interval


def validate_cron(expression: object) -> str:
    """A five-field cron expression that cronsim accepts."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValidationError("cron must be a cron expression.", code="invalid_cron")
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError) as exc:
        raise ValidationError(
            f"Invalid cron expression {expression!r}: {exc}", code="invalid_cron"
        ) from exc
    return expression.strip()


def validate_timezone(name: object) -> str:
    """An IANA time zone name."""
    if not isinstance(name, str) or not name:
        raise ValidationError("timezone must be an IANA name.", code="invalid_timezone")
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidationError(f"Unknown time zone {name!r}.", code="invalid_timezone") from exc
    return name


@dataclass(frozen=True)
class Definition:
    """A validated schedule definition (from settings, the admin or the API)."""

    name: str
    queue: str
    cron: str = ""
    every: timedelta | None = None
    trigger: Any = None
    timezone: str = "UTC"
    spec: Any = None
    priority: int = 0
    enabled: bool = True
    catch_up: str = CatchUp.ONE
    skip_if_running: bool = False
    #: The Schedule fields of the run constraints (`constraints.clean_constraints`).
    limits: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """The Schedule model fields this definition sets (`enabled` aside)."""
        return {
            **constraints.clean_constraints({}, FieldErrors()),
            **self.limits,
            "cron": self.cron,
            "every": self.every,
            "trigger": self.trigger,
            "timezone": self.timezone,
            "queue": self.queue,
            "spec": {} if self.spec is None else self.spec,
            "priority": self.priority,
            "catch_up": self.catch_up,
            "skip_if_running": self.skip_if_running,
        }


def clean_definition(name: object, raw: object) -> Definition:
    """Validate one schedule; ValidationError naming every bad key."""
    errors = FieldErrors()
    check = errors.check

    checked_name = check("name", validate_schedule_name, name)
    if not isinstance(raw, Mapping):
        raise ValidationError(f"Schedule {name!r} must be a dict.", code="invalid_schedule")
    unknown = set(raw) - set(DEFINITION_KEYS)
    if unknown:
        errors["__all__"] = ValidationError(
            f"Unknown keys: {', '.join(sorted(map(str, unknown)))}.", code="unknown_field"
        )
    has_cron, has_every = raw.get("cron") not in (None, ""), raw.get("every") is not None
    has_trigger = raw.get("trigger") is not None
    if has_cron + has_every + has_trigger != 1:
        errors["cron"] = ValidationError(
            "Give exactly one of cron, every and trigger.", code="cron_or_every"
        )
    trigger = check("trigger", clean_trigger, raw["trigger"]) if has_trigger else None
    cron = check("cron", validate_cron, raw["cron"]) if has_cron else ""
    every = check("every", parse_every, raw["every"]) if has_every else None
    timezone = check("timezone", validate_timezone, raw.get("timezone", "UTC"))
    queue = check("queue", validate_queue, raw.get("queue"))
    spec = check("spec", validate_json, raw.get("spec", {}))
    priority = check("priority", validate_priority, raw.get("priority", 0))
    for key in ("enabled", "skip_if_running"):
        if not isinstance(raw.get(key, False), bool):
            errors[key] = ValidationError(f"{key} must be true or false.", code="invalid")
    limits = constraints.clean_constraints(raw, errors)
    catch_up = raw.get("catch_up", CatchUp.ONE)
    if catch_up not in CatchUp.values:
        errors["catch_up"] = ValidationError(
            f"catch_up must be one of {', '.join(CatchUp.values)}.", code="invalid_choice"
        )
    if trigger is not None and trigger.get("with_events") and not isinstance(spec, dict):
        errors["spec"] = ValidationError(
            "A trigger with_events adds the events to the spec: the spec must be an object.",
            code="invalid_spec",
        )
    errors.raise_any()
    return Definition(
        name=checked_name,
        queue=queue,
        cron=cron or "",
        every=every,
        trigger=trigger,
        timezone=timezone,
        spec=spec,
        priority=priority,
        enabled=raw.get("enabled", True),
        catch_up=str(catch_up),
        skip_if_running=raw.get("skip_if_running", False),
        limits=limits,
    )


# -- time ---------------------------------------------------------------------------------------


def next_tick(schedule: Schedule | Definition, after: datetime) -> datetime:
    """The first tick of `schedule` strictly after `after`, in UTC."""
    if schedule.every is not None:
        step = schedule.every.total_seconds()
        elapsed = (after - _EPOCH).total_seconds()
        return _EPOCH + timedelta(seconds=(elapsed // step + 1) * step)
    return _next_cron_tick(schedule.cron, schedule.timezone, after)


@functools.lru_cache(maxsize=4096)
def _next_cron_tick(cron: str, timezone: str, after: datetime) -> datetime:
    """`next_tick` of a cron expression: cached, since the schedules of a pass share a few
    expressions and one clock."""
    zone = zoneinfo.ZoneInfo(timezone)
    # From a time in the second pass of a repeated hour, cronsim may answer with a time of the
    # first pass (earlier in UTC): skip to the first tick that is really later.
    for candidate in CronSim(cron, after.astimezone(zone)):
        found = candidate.astimezone(UTC)
        if found > after:
            return found
    raise ValueError(f"cron expression {cron!r} has no tick after {after}")


def first_run(schedule: Schedule | Definition, after: datetime) -> datetime | None:
    """The `next_run` of a new or changed schedule: its next tick (None with a trigger, which
    fires on events instead)."""
    return None if schedule.trigger is not None else next_tick(schedule, after)


def latest_tick(schedule: Schedule | Definition, now: datetime) -> datetime:
    """The last tick of `schedule` at or before `now`, in UTC."""
    if schedule.every is not None:
        step = schedule.every.total_seconds()
        return _EPOCH + timedelta(seconds=((now - _EPOCH).total_seconds() // step) * step)
    return _latest_cron_tick(schedule.cron, schedule.timezone, now)


@functools.lru_cache(maxsize=4096)
def _latest_cron_tick(cron: str, timezone: str, now: datetime) -> datetime:
    """`latest_tick` of a cron expression, cached like `_next_cron_tick`."""
    zone = zoneinfo.ZoneInfo(timezone)
    start = (now + timedelta(seconds=1)).astimezone(zone)
    for candidate in CronSim(cron, start, reverse=True):
        found = candidate.astimezone(UTC)
        if found <= now:
            return found
    raise ValueError(f"cron expression {cron!r} has no tick before {now}")


def ticks_between(schedule: Schedule, first: datetime, now: datetime, limit: int) -> list[datetime]:
    """Ticks from `first` (itself a tick) up to `now` inclusive, at most `limit` of them."""
    ticks: list[datetime] = []
    tick = first
    while tick <= now and len(ticks) < limit:
        ticks.append(tick)
        tick = next_tick(schedule, tick)
    return ticks


def tick_rn(schedule: Schedule, tick: datetime) -> str:
    """The rn of the task of `schedule`'s tick at `tick`: the same for every monitor."""
    return f"schedule:{schedule.name}:{tick.astimezone(UTC):%Y%m%dT%H%M%S}Z"


# -- settings -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Synced:
    """What `sync_from_settings` did: `written` rows (created, updated, deleted), the names
    `deleted`, the names `kept` although this monitor's settings lack them (by the running
    monitor whose settings define them), and the names `deferred` to a monitor started later
    whose settings define them otherwise (by that monitor)."""

    written: int = 0
    deleted: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)


def sync_from_settings(
    definitions: Mapping[str, Definition],
    using: str = "default",
    now: datetime | None = None,
    keep: Collection[str] = (),
    peers: Peers | None = None,
) -> Synced:
    """Make the settings' schedules rows of Schedule; say what was done.

    New names are created (enabled as the setting says), changed definitions updated and their
    next run recomputed; an operator's pause or resume in the admin is kept. Schedules that
    came from settings and are no longer there are deleted (and logged), except those named
    in `keep` (still in the settings, but invalid there). Safe to run from several monitors.

    Monitors may run with different settings (a rolling deploy): `peers` are the monitors
    running beside the caller (read here when None, the caller counting as the newest). A
    name that a monitor started later defines is left to it; a schedule that another running
    monitor's settings define is not deleted while it runs, so its pause and its waiting
    firing are kept, and it goes once no running monitor defines it.
    """
    manager = Schedule.objects.using(using)
    now = now or _database_now(using)
    peers = peers if peers is not None else MonitorRecord.objects.using(using).peers()
    done = Synced()
    written = 0
    existing = {s.name: s for s in manager.filter(Q(from_settings=True) | Q(name__in=definitions))}
    for name, definition in definitions.items():
        row = existing.get(name)
        fields = definition.fields()
        same = (
            row is not None
            and row.from_settings
            and all(getattr(row, k) == v for k, v in fields.items())
        )
        newer = peers.newer_defining("SCHEDULES", name)
        if newer is not None:
            if row is not None and not same:
                done.deferred[name] = newer.name
            continue
        if row is None:
            try:
                with transaction.atomic(using=using):
                    manager.create(
                        name=name,
                        from_settings=True,
                        enabled=definition.enabled,
                        next_run=first_run(definition, now),
                        **fields,
                    )
                written += 1
            except IntegrityError:
                pass  # another monitor created it a moment ago
            continue
        if same:
            continue
        if definition.trigger is not None and row.trigger != definition.trigger:
            # A new trigger counts the events from now on (`Schedule.save`).
            fields["counts_after"], fields["counts_from"] = watermark()
        changed = manager.filter(pk=row.pk).update(
            from_settings=True, next_run=first_run(definition, now), updated=Now(), **fields
        )
        written += changed
    gone = []
    for name, row in existing.items():
        if not row.from_settings or name in definitions or name in keep:
            continue
        other = peers.defining("SCHEDULES", name)
        if other is not None:
            done.kept[name] = other.name
        else:
            gone.append(name)
    if gone:
        written += delete(manager.filter(name__in=gone, from_settings=True), using)
        for name in gone:
            logger.info(
                "schedule %r deleted: it came from SCYLLA['SCHEDULES'], and no running "
                "monitor's settings define it any more",
                name,
            )
    return dataclasses.replace(done, written=written, deleted=gone)


def delete(schedules: QuerySet[Schedule], using: str | None = None) -> int:
    """Delete `schedules` (on `using`, the database schedules are written to by default) with
    what is theirs: their firings that wait (for their trigger's delay or their run
    constraints) are dropped with them, and the events they consumed are free for the purge.
    Their rows are locked first, as a pass that fires or releases them locks them: such a pass
    finishes before (its task submitted) or skips them. Returns how many rows were deleted
    (schedules and theirs)."""
    using = using or router.db_for_write(Schedule)
    with db.write_atomic(using):
        pks = list(schedules.using(using).select_for_update().values_list("pk", flat=True))
        if not pks:
            return 0
        return Schedule.objects.using(using).filter(pk__in=pks).delete()[0]


def _database_now(using: str) -> datetime:
    """The schedules' clock: the database's (`db.read_clock`), in UTC."""
    return db.read_clock(using).astimezone(UTC)


# -- ticking ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    """A firing a pass handled: the schedule, the tick (or firing) time, its task's rn (None
    unless submitted), and the `outcome`: "submitted", "skipped" (an unmet run constraint with
    when_unmet="skip"), "waiting" (held for its constraints), "merged" (into a firing that
    waits), "cancelled" (waited `wait_timeout`) or "forced" (waited, then run anyway)."""

    schedule: str
    time: datetime
    rn: str | None
    outcome: str = "submitted"


def tick(
    using: str = "default", now: datetime | None = None, skip: Collection[str] = ()
) -> list[Tick]:
    """Submit the task of every due tick of every enabled schedule; return what was done.

    `now` is the schedules' clock: the database's by default (a test passes a fake one). A
    schedule is due when its `next_run` has come. After a gap (no monitor ran), `catch_up`
    decides: `one` submits the latest missed tick only, `all` every missed tick (in
    transactions of up to `MAX_CATCH_UP`), `none` only a tick seen within `MISSED_AFTER` of its
    time. With `skip_if_running`, no tick is submitted while the previous tick's task is ready or
    running. The schedules named in `skip` are not ticked (invalid in the settings).
    """
    done: list[Tick] = []
    manager = Schedule.objects.using(using)
    if skip:
        manager = manager.exclude(name__in=sorted(skip))
    clock = now or _database_now(using)
    while True:
        with db.write_atomic(using):
            batch = list(
                manager.filter(enabled=True, next_run__lte=clock)
                .select_for_update(skip_locked=True)
                .order_by("next_run", "pk")[:BATCH]
            )
            if not batch:
                break
            gates = constraints.prefetch(batch, clock, using)
            for schedule in batch:
                done.extend(_tick_one(gates[schedule.pk], clock))
            constraints.save_all(list(gates.values()), using)
    done.extend(release(using, clock, skip))
    return done


def _tick_one(gate: constraints.Gate, now: datetime) -> list[Tick]:
    schedule = gate.schedule
    if schedule.next_run is None:
        raise RuntimeError(f"schedule {schedule.name!r} is due but has no next run")
    more = False
    if schedule.catch_up == CatchUp.ALL:
        chosen = ticks_between(schedule, schedule.next_run, now, MAX_CATCH_UP)
        more = len(chosen) == MAX_CATCH_UP
    else:
        latest = max(schedule.next_run, latest_tick(schedule, now))
        on_time = now - latest <= MISSED_AFTER
        chosen = [latest] if schedule.catch_up == CatchUp.ONE or on_time else []
    done = [fire(gate, t, tick_rn(schedule, t)) for t in chosen]
    # With catch_up="all" and more missed ticks than the limit, the next transaction goes on.
    gate.set(next_run=next_tick(schedule, chosen[-1] if more else now), updated=Now())
    return done


def fire(gate: constraints.Gate, fired: datetime, rn: str, spec: Any = None) -> Tick:
    """One firing of the schedule `gate` holds locked (a tick, or a trigger's firing at
    `fired`): its task `rn` is submitted if the run constraints allow it now, else the firing
    waits (merged into the one already waiting, if any) or is skipped.

    The one way a firing submits its task. `spec` is the task's spec (None: the schedule's).
    The caller holds the schedule row's lock and calls `gate.save()` (or `save_all` for a
    batch of gates) before committing: that inserts the task and writes the schedule's
    `last_run` and `last_task`.
    """
    schedule = gate.schedule
    with tracing.firing_span(schedule.name, schedule.queue):
        return _fire(gate, fired, rn, spec)


def _fire(gate: constraints.Gate, fired: datetime, rn: str, spec: Any) -> Tick:
    """`fire()`, in the span of the firing."""
    schedule = gate.schedule
    # Without constraints nothing waits (a firing held before they were removed is released
    # by the next pass: `reschedule` makes it due).
    waiting = gate.held() if gate.constraints.any else None
    if waiting is not None:
        gate.merge()
        return Tick(schedule.name, fired, None, "merged")
    problems = gate.unmet() if gate.constraints.any else []
    if problems:
        if gate.skips(problems):
            return Tick(schedule.name, fired, None, "skipped")
        gate.hold(rn, fired, spec, problems)
        return Tick(schedule.name, fired, None, "waiting")
    _submit(gate, fired, rn, spec)
    return Tick(schedule.name, fired, rn)


def _submit(gate: constraints.Gate, fired: datetime, rn: str, spec: Any) -> None:
    """The task of a firing, made the schedule's last run: `gate.save()` inserts it (once: the
    rn is unique), stamped with its handler's spec version and stored with the trace of the
    firing, and writes the schedule."""
    schedule = gate.schedule
    task = Task(
        rn=rn,
        queue=schedule.queue,
        spec=schedule.spec if spec is None else spec,
        priority=schedule.priority,
        version=spec_versions.declared_version(schedule.queue),
    )
    gate.launched(task, fired, tracing.current_traceparent())


def release(
    using: str = "default", now: datetime | None = None, skip: Collection[str] = ()
) -> list[Tick]:
    """Look again at the waiting firings due a look (`recheck` come): submit those whose
    constraints are met, cancel or force those that waited `wait_timeout`, and note what the
    others still wait for. Each under its schedule row's lock (SKIP LOCKED), like the ticks."""
    clock = now or _database_now(using)
    done: list[Tick] = []
    due = WaitingRun.objects.using(using).filter(recheck__lte=clock)
    schedules = Schedule.objects.using(using).filter(enabled=True)
    if skip:
        schedules = schedules.exclude(name__in=sorted(skip))
    while True:
        with db.write_atomic(using):
            batch = list(
                schedules.filter(pk__in=due.values("schedule_id"))
                .select_for_update(skip_locked=True)
                .order_by("pk")[:BATCH]
            )
            if not batch:
                return done
            gates = constraints.prefetch(batch, clock, using)
            for schedule in batch:
                done.append(_release_one(gates[schedule.pk], clock))
            constraints.save_all(list(gates.values()), using)


def _release_one(gate: constraints.Gate, now: datetime) -> Tick:
    schedule = gate.schedule
    waiting = gate.held()
    if waiting is None:
        raise RuntimeError(f"schedule {schedule.name!r} has no waiting firing to release")
    problems = gate.unmet()
    timed_out = waiting.deadline is not None and now >= waiting.deadline
    outcome = "submitted"
    if problems and timed_out:
        outcome = "forced" if schedule.on_timeout == OnTimeout.FORCE else "cancelled"
    if problems and outcome == "submitted":
        gate.still_waits(problems)
        return Tick(schedule.name, waiting.fired, None, "waiting")
    gate.drop_waiting()
    if outcome == "cancelled":
        logger.warning(
            "schedule %r: the firing of %s waited %s for its constraints (%s) and is cancelled",
            schedule.name,
            waiting.fired.isoformat(),
            now - waiting.since,
            "; ".join(p.detail for p in problems),
        )
        return Tick(schedule.name, waiting.fired, None, outcome)
    with tracing.firing_span(schedule.name, schedule.queue):  # a firing that waited: sent now
        _submit(gate, waiting.fired, waiting.rn, waiting.spec)
    gate.set(updated=Now())
    return Tick(schedule.name, waiting.fired, waiting.rn, outcome)


def run_now(schedule: Schedule, using: str | None = None) -> Task:
    """Submit `schedule`'s task at once, outside its ticks (the admin's and API's "Run now")."""
    using = using or schedule._state.db or "default"
    rn = f"schedule:{schedule.name}:manual-{uuid.uuid4().hex[:12]}"
    task = Task.objects.using(using).submit(
        schedule.queue, schedule.spec, priority=schedule.priority, rn=rn
    )
    Schedule.objects.using(using).filter(pk=schedule.pk).update(last_task=rn, updated=Now())
    schedule.last_task = rn
    return task


def pause(schedules: QuerySet[Schedule]) -> list[str]:
    """Disable the enabled ones of `schedules` (the admin's "Disable", `scylla_schedules
    pause`): no tick or trigger fires them until they are resumed; a firing that waits for its
    run constraints stays. Returns the names it paused."""
    using = schedules.db
    enabled = Schedule.objects.using(using).filter(pk__in=schedules.values("pk"), enabled=True)
    with db.write_atomic(using):
        names = list(enabled.select_for_update().values_list("name", flat=True))
        Schedule.objects.using(using).filter(name__in=names).update(enabled=False, updated=Now())
    return sorted(names)


def resume(schedules: QuerySet[Schedule]) -> list[str]:
    """Enable the disabled ones of `schedules` (the admin's "Enable", `scylla_schedules
    resume`), each with its next run set from now on the database's clock in the same write:
    the ticks missed while paused are not caught up. A firing that waits is looked at again at
    the next pass. Returns the names it resumed."""
    using = schedules.db
    now = _database_now(using)
    resumed = []
    for schedule in schedules.filter(enabled=False):
        enabled = Schedule.objects.using(using).filter(pk=schedule.pk, enabled=False)
        if enabled.update(enabled=True, next_run=first_run(schedule, now), updated=Now()):
            WaitingRun.objects.using(using).filter(schedule=schedule).update(recheck=now)
            resumed.append(schedule.name)
    return sorted(resumed)


def reschedule(schedule: Schedule, using: str | None = None) -> None:
    """Set `next_run` from now (after creating or editing a schedule by hand)."""
    using = using or schedule._state.db or "default"
    now = _database_now(using)
    schedule.next_run = first_run(schedule, now)
    Schedule.objects.using(using).filter(pk=schedule.pk).update(
        next_run=schedule.next_run, updated=Now()
    )
    # A waiting firing is looked at again under the new constraints.
    WaitingRun.objects.using(using).filter(schedule=schedule).update(recheck=now)


def schedule_errors(value: object) -> dict[str, str]:
    """Every bad schedule of a `SCHEDULES` value, by name, with what is wrong with it."""
    if not isinstance(value, dict):
        return {"": f"SCYLLA['SCHEDULES'] must be a dict of schedules by name, got {value!r}"}
    errors: dict[str, str] = {}
    for name, raw in value.items():
        try:
            clean_definition(name, raw)
        except ValidationError as exc:
            errors[str(name)] = "; ".join(
                f"{key}: {' '.join(messages)}"
                for key, messages in getattr(exc, "message_dict", {"": exc.messages}).items()
            )
    return errors


@dataclass(frozen=True)
class SettingsSchedules:
    """The schedules of `SCYLLA["SCHEDULES"]`: the `valid` ones, validated, and what is wrong
    with each `invalid` one, by name (the name "" when the setting itself is not a dict)."""

    valid: dict[str, Definition]
    invalid: dict[str, str]


def read_settings() -> SettingsSchedules:
    """The schedules of `SCYLLA["SCHEDULES"]`, the valid ones apart from the invalid ones: the
    monitor ticks the former and reports the latter, where `configured()` refuses them all."""
    value = scylla_settings.SCHEDULES
    invalid = schedule_errors(value)
    if "" in invalid:
        return SettingsSchedules({}, invalid)
    valid = {
        name: clean_definition(name, raw) for name, raw in value.items() if str(name) not in invalid
    }
    return SettingsSchedules(valid, invalid)


def configured() -> dict[str, Definition]:
    """The schedules of `SCYLLA["SCHEDULES"]`, validated; ImproperlyConfigured if one is bad."""
    value = scylla_settings.SCHEDULES
    errors = schedule_errors(value)
    if errors:
        name, problem = next(iter(errors.items()))
        raise ImproperlyConfigured(f"SCYLLA['SCHEDULES'][{name!r}] is invalid: {problem}")
    return {name: clean_definition(name, raw) for name, raw in value.items()}
