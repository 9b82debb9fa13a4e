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

A schedule with a `trigger` instead of `cron`/`every` fires on events (`scylla_django.triggers`).
Every firing, a tick or a trigger's, submits its task through `submit_firing`.
"""

from __future__ import annotations

import uuid
import zoneinfo
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cronsim import CronSim, CronSimError
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from . import db
from .conf import scylla_settings
from .db import Now
from .enums import Status
from .models import CatchUp, Schedule, Task, send_on_commit
from .signals import task_submitted
from .text import DurationError, positive_duration
from .triggers import clean_trigger
from .validation import (
    FieldErrors,
    validate_json,
    validate_priority,
    validate_queue,
    validate_schedule_name,
)

#: Most missed ticks submitted in one transaction with `catch_up="all"` (the next one goes on).
MAX_CATCH_UP = 1000
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
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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

    def fields(self) -> dict[str, Any]:
        """The Schedule model fields this definition sets (`enabled` aside)."""
        return {
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
    )


# -- time ---------------------------------------------------------------------------------------


def next_tick(schedule: Schedule | Definition, after: datetime) -> datetime:
    """The first tick of `schedule` strictly after `after`, in UTC."""
    if schedule.every is not None:
        step = schedule.every.total_seconds()
        elapsed = (after - _EPOCH).total_seconds()
        return _EPOCH + timedelta(seconds=(elapsed // step + 1) * step)
    zone = zoneinfo.ZoneInfo(schedule.timezone)
    # From a time in the second pass of a repeated hour, cronsim may answer with a time of the
    # first pass (earlier in UTC): skip to the first tick that is really later.
    for candidate in CronSim(schedule.cron, after.astimezone(zone)):
        found = candidate.astimezone(UTC)
        if found > after:
            return found
    raise ValueError(f"cron expression {schedule.cron!r} has no tick after {after}")


def first_run(schedule: Schedule | Definition, after: datetime) -> datetime | None:
    """The `next_run` of a new or changed schedule: its next tick (None with a trigger, which
    fires on events instead)."""
    return None if schedule.trigger is not None else next_tick(schedule, after)


def latest_tick(schedule: Schedule | Definition, now: datetime) -> datetime:
    """The last tick of `schedule` at or before `now`, in UTC."""
    if schedule.every is not None:
        step = schedule.every.total_seconds()
        return _EPOCH + timedelta(seconds=((now - _EPOCH).total_seconds() // step) * step)
    zone = zoneinfo.ZoneInfo(schedule.timezone)
    start = (now + timedelta(seconds=1)).astimezone(zone)
    for candidate in CronSim(schedule.cron, start, reverse=True):
        found = candidate.astimezone(UTC)
        if found <= now:
            return found
    raise ValueError(f"cron expression {schedule.cron!r} has no tick before {now}")


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


def sync_from_settings(
    definitions: Mapping[str, Definition],
    using: str = "default",
    now: datetime | None = None,
    keep: Collection[str] = (),
) -> int:
    """Make the settings' schedules rows of Schedule; return how many rows were written.

    New names are created (enabled as the setting says), changed definitions updated and their
    next run recomputed; an operator's pause or resume in the admin is kept. Schedules that
    came from settings and are no longer there are deleted, except those named in `keep` (still
    in the settings, but invalid there). Safe to run from several monitors.
    """
    manager = Schedule.objects.using(using)
    now = now or _database_now(using)
    written = 0
    existing = {s.name: s for s in manager.filter(Q(from_settings=True) | Q(name__in=definitions))}
    for name, definition in definitions.items():
        row = existing.get(name)
        if row is None:
            try:
                with transaction.atomic(using=using):
                    manager.create(
                        name=name,
                        from_settings=True,
                        enabled=definition.enabled,
                        next_run=first_run(definition, now),
                        **definition.fields(),
                    )
                written += 1
            except IntegrityError:
                pass  # another monitor created it a moment ago
            continue
        fields = definition.fields()
        if row.from_settings and all(getattr(row, k) == v for k, v in fields.items()):
            continue
        changed = manager.filter(pk=row.pk).update(
            from_settings=True, next_run=first_run(definition, now), updated=Now(), **fields
        )
        written += changed
    gone = [
        name
        for name, row in existing.items()
        if row.from_settings and name not in definitions and name not in keep
    ]
    if gone:
        written += manager.filter(name__in=gone, from_settings=True).delete()[0]
    return written


def _database_now(using: str) -> datetime:
    """The schedules' clock: the database's (`db.read_clock`), in UTC."""
    return db.read_clock(using).astimezone(UTC)


# -- ticking ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    """A tick a pass chose: the schedule, the tick time, its task's rn (None if skipped because
    the previous tick's task is still ready or running)."""

    schedule: str
    time: datetime
    rn: str | None


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
            schedule = (
                manager.filter(enabled=True, next_run__lte=clock)
                .select_for_update(skip_locked=True)
                .order_by("next_run", "pk")
                .first()
            )
            if schedule is None:
                return done
            done.extend(_tick_one(schedule, clock, using))


def _tick_one(schedule: Schedule, now: datetime, using: str) -> list[Tick]:
    assert schedule.next_run is not None
    more = False
    if schedule.catch_up == CatchUp.ALL:
        chosen = ticks_between(schedule, schedule.next_run, now, MAX_CATCH_UP)
        more = len(chosen) == MAX_CATCH_UP
    else:
        latest = max(schedule.next_run, latest_tick(schedule, now))
        on_time = now - latest <= MISSED_AFTER
        chosen = [latest] if schedule.catch_up == CatchUp.ONE or on_time else []
    if schedule.skip_if_running and schedule.last_task and chosen:
        busy = Task.objects.using(using).filter(
            rn=schedule.last_task, status__in=[Status.READY, Status.RUNNING]
        )
        if busy.exists():
            chosen = []
    tasks = [
        Task(
            rn=tick_rn(schedule, t),
            queue=schedule.queue,
            spec=schedule.spec,
            priority=schedule.priority,
        )
        for t in chosen
    ]
    manager = Task.objects.using(using)
    if tasks:
        manager.bulk_create(tasks, ignore_conflicts=True, batch_size=500)
    # With catch_up="all" and more missed ticks than the limit, the next transaction goes on.
    following = next_tick(schedule, chosen[-1] if more else now)
    values: dict[str, Any] = {"next_run": following, "updated": Now()}
    if tasks:
        values |= {"last_run": chosen[-1], "last_task": tasks[-1].rn}
    Schedule.objects.using(using).filter(pk=schedule.pk).update(**values)
    if not tasks:
        return [Tick(schedule.name, t, None) for t in chosen]
    for task in tasks:
        send_on_commit(task_submitted, using, task=task)
    return [Tick(schedule.name, t, task.rn) for t, task in zip(chosen, tasks, strict=True)]


def submit_firing(
    schedule: Schedule, rn: str, spec_extra: Mapping[str, Any] | None, now: datetime, using: str
) -> Task:
    """Submit the task of one firing of `schedule` at `now` (a trigger's firing), in the
    caller's transaction: rn `rn`, the schedule's spec with `spec_extra` merged in (an object
    spec), and the schedule's last run and task set. A task already called `rn` is kept."""
    spec = schedule.spec
    if spec_extra:
        spec = {**spec, **spec_extra} if isinstance(spec, dict) else spec
    task = Task(rn=rn, queue=schedule.queue, spec=spec, priority=schedule.priority)
    Task.objects.using(using).bulk_create([task], ignore_conflicts=True)
    Schedule.objects.using(using).filter(pk=schedule.pk).update(
        last_run=now, last_task=rn, updated=Now()
    )
    send_on_commit(task_submitted, using, task=task)
    return task


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


def reschedule(schedule: Schedule, using: str | None = None) -> None:
    """Set `next_run` from now (after creating or editing a schedule by hand)."""
    using = using or schedule._state.db or "default"
    schedule.next_run = first_run(schedule, _database_now(using))
    Schedule.objects.using(using).filter(pk=schedule.pk).update(
        next_run=schedule.next_run, updated=Now()
    )


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
