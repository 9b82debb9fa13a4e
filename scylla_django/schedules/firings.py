"""Firing the schedules that have a trigger: evaluate, consume the events, submit the task.

A pass (`fire`) first reads every trigger it evaluates together (`triggers.screen`, a few
queries however many triggers), then takes each enabled schedule whose trigger is met in a
transaction of its own per firing (as long as it fires, up to `MAX_FIRINGS`), locked with
SKIP LOCKED: any number of monitors share the schedules, none waits for another. When its
trigger is met, one `Firing` row, one `Consumption` row per consumed event (unique per
schedule and event) and the task (rn `schedule:<name>:e<first event id>`) are written
together. The task goes through the
schedule's run constraints as a tick's does (`schedules.fire`): it may wait for them in a
`WaitingRun` row, merge into the firing that waits, or be skipped; its events are consumed
either way. A firing is all or nothing, so a monitor killed mid-way loses none and the next one
finds the same events unconsumed; the unique consumptions and rns mean no event ever fires a
schedule twice.

A trigger counts only the events after its schedule's watermark (`triggers.mark_of`), unless
it says `since: "all"`.

A trigger with a `delay` fires `delayed`: the Firing row and its consumptions are written as
above, with the time it is `due`, and no task. Each pass then `release`s the delayed firings
that are due, under their schedule's lock: each goes through the run constraints then (its
outcome written over `delayed`), in the order they are due. A firing of a disabled schedule
waits on (it is released once the schedule is enabled again, at once if it is due by then); a
deleted schedule's delayed firings go with it (`schedules.delete`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Max

from .. import db, schedules
from ..db import Now
from ..models import Consumption, Event, Firing, FiringOutcome, Schedule, WaitingRun
from . import constraints
from .triggers import (
    SINCE_CHANGE,
    Mark,
    State,
    delay_of,
    evaluate,
    leaf_kind,
    leaves,
    mark_of,
    screen,
)

#: Most firings of one schedule in a pass (a backlog of `count` events fires again and again).
MAX_FIRINGS = 100


@dataclass(frozen=True)
class Fired:
    """A firing a pass made: the schedule, its task's rn, the ids of the events consumed, and
    what the run constraints made of it (`outcome`, a `FiringOutcome`)."""

    schedule: str
    rn: str
    events: tuple[int, ...]
    outcome: str = FiringOutcome.SUBMITTED


def firing_rn(schedule: Schedule, state: State) -> str:
    """The rn of the task of a firing: from the schedule and the first event it consumes (an
    event fires a schedule once, so no two firings of a schedule share it)."""
    return f"schedule:{schedule.name}:e{state.events[0].pk}"


def fire(
    using: str = "default",
    now: datetime | None = None,
    skip: Collection[str] = (),
    kinds: Collection[str] | None = None,
    sweep: Sweep | None = None,
) -> list[Fired]:
    """Fire every enabled schedule whose trigger is met; return the firings.

    `now` is the triggers' clock (the database's by default; a test passes a fake one for
    `quiet` and `window`). The schedules named in `skip` are left alone (invalid settings).
    With `kinds`, only the triggers that listen to one of these event kinds are evaluated,
    those that time alone may meet (`quiet`), and with `sweep`, those it has not seen as they
    are (enabled, made or changed since its last pass): see `Sweep`.
    """
    candidates = Schedule.objects.using(using).filter(enabled=True, trigger__isnull=False)
    if skip:
        candidates = candidates.exclude(name__in=sorted(skip))
    done: list[Fired] = []
    clock = now or db.read_clock(using)
    rows = candidates.order_by("pk").values_list("pk", "trigger", "counts_after", "counts_from")
    every: dict[int, dict[str, Any]] = {}
    marks: dict[int, Mark | None] = {}
    for pk, trigger, counts_after, counts_from in rows:
        if isinstance(trigger, dict):
            every[pk] = trigger
            marks[pk] = mark_of(trigger, counts_after, counts_from)
    fresh = sweep.fresh(every) if sweep is not None else set()
    triggers = {
        pk: trigger
        for pk, trigger in every.items()
        if kinds is None or pk in fresh or _concerned(trigger, kinds)
    }
    # A read first, without a transaction, of every trigger at once: most triggers are unmet
    # at most passes, and those cost no lock. A met one is evaluated again under its lock
    # before it fires.
    met = screen(triggers, clock, using, marks)
    for pk in triggers:
        if pk not in met:
            continue
        for _ in range(MAX_FIRINGS):
            with db.write_atomic(using):
                schedule = (
                    Schedule.objects.using(using)
                    .select_for_update(skip_locked=True)
                    .filter(pk=pk, enabled=True, trigger__isnull=False)
                    .first()
                )
                if schedule is None:
                    break  # another monitor has it, or it changed
                fired = fire_one(schedule, now or db.read_clock(using), using)
            if fired is None:
                break
            done.append(fired)
    return done


def _concerned(trigger: Any, kinds: Collection[str]) -> bool:
    """Whether `trigger` may be met now when it was not: it listens to one of `kinds`, or has a
    `quiet` part (met by time alone; a window only ever makes a trigger unmet)."""
    if not isinstance(trigger, dict):
        return False
    parts = trigger.get("all") or trigger.get("any")
    if parts is not None:
        return any(_concerned(part, kinds) for part in parts)
    return "quiet" in trigger or leaf_kind(trigger)[0] in kinds


class Sweep:
    """Which triggers a monitor evaluates at each pass: after a full pass, only those whose
    event kinds got a new event (by the newest event id of each kind, one query), those with a
    `quiet` part and those of schedules enabled, made or changed since the last pass (their
    unconsumed events may meet them at once); every `full_every` seconds all of them again,
    which also catches an event that committed after a newer one of its kind was seen."""

    def __init__(self, full_every: float = 60.0) -> None:
        self.full_every = full_every
        self.newest: dict[str, int] = {}
        self.full_at = 0.0
        self.seen: dict[int, str] = {}

    def fresh(self, triggers: Mapping[int, Any]) -> set[int]:
        """The schedules among `triggers` (every enabled one's, by schedule id) not seen as
        they are at the last pass; remembers them for the next."""
        texts = {pk: json.dumps(trigger, sort_keys=True) for pk, trigger in triggers.items()}
        fresh = {pk for pk, text in texts.items() if self.seen.get(pk) != text}
        self.seen = texts
        return fresh

    def kinds(self, using: str, monotonic: float) -> set[str] | None:
        """The kinds with new events since the last pass (None: evaluate every trigger)."""
        _tasks, listened_kinds = listened(using)
        newest = dict(
            Event.objects.using(using)
            .filter(kind__in=sorted(listened_kinds))
            .values("kind")
            .annotate(newest=Max("id"))
            .values_list("kind", "newest")
        )
        changed = {kind for kind, pk in newest.items() if self.newest.get(kind) != pk}
        self.newest = newest
        if monotonic - self.full_at >= self.full_every:
            self.full_at = monotonic
            return None
        return changed


def fire_one(schedule: Schedule, now: datetime, using: str) -> Fired | None:
    """Fire `schedule` (locked by the caller's transaction) if its trigger is met.

    The firing consumes its events whatever becomes of it, and goes through the schedule's
    run constraints as a tick does (`schedules.fire`): its task is submitted, or the firing
    waits (merged into the one already waiting, if any), or it is skipped. The Firing row says
    which (`outcome`); all of it is written in the caller's transaction. With a `delay`, the
    firing is `delayed` instead, until `now` plus the delay (`release`).
    """
    trigger = schedule.trigger or {}
    state = evaluate(trigger, schedule.pk, now, using, mark=mark_of_schedule(schedule))
    if not state.met or not state.events:
        return None
    rn = firing_rn(schedule, state)
    spec = None
    if trigger.get("with_events") and isinstance(schedule.spec, dict):
        spec = {**schedule.spec, "events": [event.as_json() for event in state.events]}
    delay = delay_of(trigger)
    firings = Firing.objects.using(using)
    if delay is not None:
        firing = firings.create(
            schedule=schedule, rn=rn, outcome=FiringOutcome.DELAYED, due=now + delay, spec=spec
        )
    else:
        gate = constraints.Gate(schedule, now, using)
        outcome = schedules.fire(gate, now, rn, spec).outcome
        firing = firings.create(schedule=schedule, rn=rn, outcome=outcome)
    Consumption.objects.using(using).bulk_create(
        Consumption(firing=firing, schedule=schedule, event=event) for event in state.events
    )
    if delay is None:
        gate.save(updated=Now())
    return Fired(schedule.name, rn, tuple(e.pk for e in state.events), firing.outcome)


def release(
    using: str = "default", now: datetime | None = None, skip: Collection[str] = ()
) -> list[Fired]:
    """Put the delayed firings that are due through their schedules' run constraints; return
    them with their outcomes (submitted, waiting, merged or skipped).

    Only enabled schedules' firings are released, those of the schedules named in `skip`
    aside; each schedule under its row's lock (SKIP LOCKED, like the firings), its due firings
    in the order they are due, up to `schedules.BATCH` schedules a transaction. `now` is the
    triggers' clock (the database's by default).
    """
    clock = now or db.read_clock(using)
    done: list[Fired] = []
    due = Firing.objects.using(using).filter(outcome=FiringOutcome.DELAYED, due__lte=clock)
    owners = Schedule.objects.using(using).filter(enabled=True, pk__in=due.values("schedule_id"))
    if skip:
        owners = owners.exclude(name__in=sorted(skip))
    # A read first, outside a transaction: most passes have nothing due, and cost no lock.
    if not owners.exists():
        return done
    while True:
        with db.write_atomic(using):
            batch = list(
                owners.select_for_update(skip_locked=True).order_by("pk")[: schedules.BATCH]
            )
            if not batch:
                return done
            gates = constraints.prefetch(batch, clock, using)
            by_outcome: dict[str, list[int]] = {}
            ready = due.filter(schedule_id__in=list(gates)).order_by("due", "id")
            for firing in ready.prefetch_related("consumptions"):
                gate = gates[firing.schedule_id]
                if firing.due is None:  # `due` filtered on it: never here
                    raise RuntimeError(f"firing {firing.pk} has no due time")
                outcome = schedules.fire(gate, firing.due, firing.rn, firing.spec).outcome
                by_outcome.setdefault(outcome, []).append(firing.pk)
                events = tuple(c.event_id for c in firing.consumptions.all())
                done.append(Fired(gate.schedule.name, firing.rn, events, outcome))
            for outcome, pks in by_outcome.items():
                due.filter(pk__in=pks).update(outcome=outcome)
            for gate in gates.values():
                gate.set(updated=Now())
            constraints.save_all(list(gates.values()), using)


def mark_of_schedule(schedule: Schedule) -> Mark | None:
    """The watermark `schedule`'s trigger counts from (`triggers.mark_of`)."""
    return mark_of(schedule.trigger or {}, schedule.counts_after, schedule.counts_from)


def why_not(schedule: Schedule, using: str | None = None, now: datetime | None = None) -> list[str]:
    """What is unmet in `schedule`'s trigger now, in words (empty: it fires at the next pass)."""
    if schedule.trigger is None:
        return []
    using = using or schedule._state.db or "default"
    clock = now or db.read_clock(using)
    return evaluate(
        schedule.trigger, schedule.pk, clock, using, mark=mark_of_schedule(schedule)
    ).unmet


def delayed(schedule: Schedule, using: str | None = None) -> list[Firing]:
    """The firings of `schedule` waiting for their trigger's delay, the soonest due first."""
    using = using or schedule._state.db or "default"
    found = Firing.objects.using(using).filter(schedule=schedule, outcome=FiringOutcome.DELAYED)
    return list(found.order_by("due", "id"))


def latest_firings(schedule: Schedule, limit: int = 10) -> list[Firing]:
    """The latest `limit` firings of `schedule`, newest first, with their consumed events."""
    using = schedule._state.db or "default"
    firings = Firing.objects.using(using).filter(schedule=schedule).order_by("-id")
    return list(firings.prefetch_related("consumptions__event")[:limit])


def why(schedule: Schedule, now: datetime) -> dict[str, Any]:
    """The whole answer to "why does `schedule` not fire now?" at `now` (`GET
    /schedules/{name}/why/`, `scylla_schedules why`): `runs` (a firing now would run at once),
    the run constraints `unmet` (as dicts of `constraints.Unmet`), the firing `waiting` for
    them (a `WaitingRun`, or None), and for a trigger (`trigger`, else None) where it counts
    events from, what is unmet in it and the firings waiting for its delay."""
    unmet = constraints.why(schedule, now)
    try:
        waiting: WaitingRun | None = schedule.waiting
    except WaitingRun.DoesNotExist:
        waiting = None
    trigger: dict[str, Any] | None = None
    if schedule.trigger is not None:
        mark = mark_of_schedule(schedule)
        trigger = {
            "since": schedule.trigger.get("since", SINCE_CHANGE),
            "counts_after": None if mark is None else mark.after,
            "counts_from": None if mark is None else mark.time,
            "unmet": why_not(schedule, now=now),
            "delayed": delayed(schedule),
        }
    return {
        "name": schedule.name,
        "enabled": schedule.enabled,
        "runs": schedule.enabled and not unmet and waiting is None,
        "now": now,
        "next_run": schedule.next_run,
        "unmet": [vars(u) for u in unmet],
        "waiting": waiting,
        "trigger": trigger,
    }


def watermarks(using: str) -> dict[str, int]:
    """For each event kind that every trigger listening to it counts from a watermark, the
    lowest event id they count after: the events up to it no trigger will count (those of a
    kind a trigger with `since: "all"` or without a watermark listens to may all count)."""
    lowest: dict[str, int] = {}
    every: set[str] = set()
    rows = Schedule.objects.using(using).filter(trigger__isnull=False)
    for trigger, counts_after, counts_from in rows.values_list(
        "trigger", "counts_after", "counts_from"
    ):
        if not isinstance(trigger, dict):
            continue
        mark = mark_of(trigger, counts_after, counts_from)
        for leaf in leaves(trigger):
            kind = leaf_kind(leaf)[0]
            if mark is None:
                every.add(kind)
            else:
                lowest[kind] = min(lowest.get(kind, mark.after), mark.after)
    return {kind: after for kind, after in lowest.items() if kind not in every}


def listened(using: str) -> tuple[set[tuple[str, str]], set[str]]:
    """What the enabled triggers listen to: (queue, status) pairs of `on_task` and event kinds."""
    tasks: set[tuple[str, str]] = set()
    kinds: set[str] = set()
    triggers = Schedule.objects.using(using).filter(trigger__isnull=False)
    for trigger in triggers.values_list("trigger", flat=True):
        if not isinstance(trigger, dict):
            continue
        for leaf in leaves(trigger):
            kinds.add(leaf_kind(leaf)[0])
            if "on_task" in leaf:
                tasks.add((leaf["on_task"], leaf.get("status", "completed")))
    return tasks, kinds
