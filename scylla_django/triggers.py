"""Triggers: the event conditions a schedule fires on, instead of `cron` or `every`.

```python
{"on_event": "partition.added", "match": {"dataset": "sales"}}   # each arrival
{"on_task": "ingest", "status": "completed"}                     # after a task of ingest
{"on_event": "partition.added", "count": 4}                      # every 4 partitions
{"on_event": "partition.added", "quiet": "10m"}                  # 10 minutes after the last
{"all": [{"on_task": "a"}, {"on_task": "b"}], "window": "1h"}    # both, within an hour
{"any": [...]}                                                   # either
```

A leaf names the events it listens to: `on_event` (a kind, and a `match` on the payload,
`{path: value}`) or `on_task` (a queue, a `status` among completed, aborted and cancelled —
completed when not given — and a `match` on the task event's payload, e.g. `spec.dataset`). It is
met by the events of its kind that match and that no firing of this schedule consumed yet:

- alone, by one of them (the firing consumes them all, up to `MAX_EVENTS`);
- with `count: N`, by N of them (the firing consumes the N oldest);
- with `quiet: D`, by one of them once no matching event at all came for D (it consumes them).

`all` is met when every part is, `any` when one is (its firing consumes the events of the met
parts); with `window: D`, only events of the last D count. `with_events: true` at the top adds
the consumed events to the task's spec (`"events": [{"id", "kind", "payload", "time"}]`).

A kind no event has yet is allowed (the events may come later); a malformed match, an empty
`all`/`any`, a count below one or a duration that is not positive are refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Count, Max, Q
from django.utils.translation import gettext as _

from .durations import short
from .events import (
    TASK_KIND_PREFIX,
    match_condition,
    matching,
    unconsumed,
    validate_kind,
    validate_match,
)
from .models import Consumption, Event
from .text import DurationError, positive_duration
from .validation import validate_queue

#: Most events one firing consumes (the rest fire the next one).
MAX_EVENTS = 1000
#: Most selections of events (leaves' kind, match and window) `screen` reads in one query (two
#: columns each: the databases cap both the columns and the parameters of a query).
SCREEN_LEAVES = 200
#: The statuses an `on_task` trigger may listen to.
TASK_STATUSES = ("completed", "aborted", "cancelled")

_LEAF_KEYS = {"on_event", "on_task", "status", "match", "count", "quiet"}
_GROUP_KEYS = {"all", "any", "window"}


def _invalid(message: str, code: str) -> ValidationError:
    return ValidationError(message, code=code)


def _duration(value: object, what: str) -> timedelta:
    try:
        return positive_duration(value)
    except DurationError:
        raise _invalid(
            f'{what} must be a positive duration such as "10m", not {value!r}.',
            "invalid_duration",
        ) from None


def clean_trigger(raw: object, top: bool = True) -> dict[str, Any]:
    """A trigger, validated: the same dict, ValidationError saying what is wrong."""
    if not isinstance(raw, Mapping):
        raise _invalid(f"A trigger must be an object, not {raw!r}.", "invalid_trigger")
    raw = dict(raw)
    if top:
        with_events = raw.pop("with_events", False)
        if not isinstance(with_events, bool):
            raise _invalid("with_events must be true or false.", "invalid_trigger")
        cleaned = clean_trigger(raw, top=False)
        return {**cleaned, "with_events": True} if with_events else cleaned
    groups = [key for key in ("all", "any") if key in raw]
    if groups:
        if len(groups) > 1 or set(raw) - _GROUP_KEYS:
            raise _invalid(
                f"A trigger with {groups[0]} takes only window besides, not "
                f"{', '.join(sorted(set(raw) - {groups[0]}))}.",
                "invalid_trigger",
            )
        parts = raw[groups[0]]
        if not isinstance(parts, list) or not parts:
            raise _invalid(f"{groups[0]} must be a non-empty list of triggers.", "empty_group")
        if "window" in raw:
            _duration(raw["window"], "window")
        return {**raw, groups[0]: [clean_trigger(part, top=False) for part in parts]}
    unknown = set(raw) - _LEAF_KEYS
    if unknown:
        raise _invalid(f"Unknown trigger keys: {', '.join(sorted(unknown))}.", "invalid_trigger")
    if ("on_event" in raw) == ("on_task" in raw):
        raise _invalid("A trigger is one of on_event, on_task, all and any.", "invalid_trigger")
    if "on_event" in raw:
        validate_kind(raw["on_event"])
        if "status" in raw:
            raise _invalid("status goes with on_task, not on_event.", "invalid_trigger")
    else:
        validate_queue(raw["on_task"])
        if raw.get("status", "completed") not in TASK_STATUSES:
            raise _invalid(
                f"status must be one of {', '.join(TASK_STATUSES)}, not {raw['status']!r}.",
                "invalid_status",
            )
    validate_match(raw.get("match"))
    if "count" in raw:
        count = raw["count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise _invalid(
                f"count must be a whole number, at least 1, not {count!r}.", "invalid_count"
            )
        if count > MAX_EVENTS:
            raise _invalid(f"count must be at most {MAX_EVENTS}.", "invalid_count")
    if "quiet" in raw:
        _duration(raw["quiet"], "quiet")
        if "count" in raw:
            raise _invalid("A trigger takes count or quiet, not both.", "invalid_trigger")
    return raw


# -- evaluation ---------------------------------------------------------------------------------


@dataclass
class State:
    """Whether a trigger (or a part of one) is met, the events a firing would consume, and
    what is unmet, in words ("count 2 of 4 partition.added")."""

    met: bool
    events: list[Event] = field(default_factory=list)
    unmet: list[str] = field(default_factory=list)


def leaf_kind(leaf: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The event kind and payload match of a leaf (`on_task` adds the queue to the match)."""
    match = dict(leaf.get("match") or {})
    if "on_task" in leaf:
        match["queue"] = leaf["on_task"]
        return TASK_KIND_PREFIX + leaf.get("status", "completed"), match
    return leaf["on_event"], match


def leaves(trigger: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every leaf of `trigger`."""
    for key in ("all", "any"):
        if key in trigger:
            return [leaf for part in trigger[key] for leaf in leaves(part)]
    return [trigger]


def describe(leaf: Mapping[str, Any]) -> str:
    """A leaf in words: `partition.added {dataset=sales}`, `task ingest completed`."""
    if "on_task" in leaf:
        words = f"task {leaf['on_task']} {leaf.get('status', 'completed')}"
    else:
        words = str(leaf["on_event"])
    match = leaf.get("match") or {}
    if match:
        words += " {" + ", ".join(f"{k}={v}" for k, v in sorted(match.items())) + "}"
    return words


def evaluate(
    trigger: Mapping[str, Any],
    schedule_id: int,
    now: datetime,
    using: str,
    since: datetime | None = None,
) -> State:
    """The state of `trigger` for the schedule `schedule_id` at `now` (the database clock),
    counting only events from `since` (a window) when given."""
    if "window" in trigger:
        start = now - _duration(trigger["window"], "window")
        since = start if since is None else max(since, start)
    for key in ("all", "any"):
        if key in trigger:
            states = [evaluate(part, schedule_id, now, using, since) for part in trigger[key]]
            met = [s for s in states if s.met]
            ok = len(met) == len(states) if key == "all" else bool(met)
            events = {e.pk: e for s in met for e in s.events} if ok else {}
            unmet = [] if ok else [u for s in states if not s.met for u in s.unmet]
            if not ok and key == "all":
                unmet.insert(
                    0,
                    _("all: %(met)d of %(parts)d parts met")
                    % {"met": len(met), "parts": len(states)},
                )
            return State(ok, sorted(events.values(), key=lambda e: e.pk), unmet)
    return _evaluate_leaf(trigger, schedule_id, now, using, since)


def _evaluate_leaf(
    leaf: Mapping[str, Any], schedule_id: int, now: datetime, using: str, since: datetime | None
) -> State:
    kind, match = leaf_kind(leaf)
    events = matching(kind, match, using)
    if since is not None:
        events = events.filter(time__gte=since)
    pending = unconsumed(events, schedule_id).order_by("id")
    what = describe(leaf)
    if "count" in leaf:
        count = leaf["count"]
        found = list(pending[:count])
        if len(found) < count:
            return State(False, unmet=[f"count {len(found)} of {count} {what}"])
        return State(True, found)
    found = list(pending[:MAX_EVENTS])
    if not found:
        return State(False, unmet=[_("no new %(what)s event") % {"what": what}])
    if "quiet" in leaf:
        quiet = _duration(leaf["quiet"], "quiet")
        latest = events.order_by("-time").values_list("time", flat=True).first()
        if latest is not None and now - latest < quiet:
            return State(
                False,
                unmet=[
                    _("quiet: last %(what)s event %(ago)s ago, waiting for %(quiet)s")
                    % {"what": what, "ago": short(now - latest), "quiet": short(quiet)}
                ],
            )
    return State(True, found)


# -- screening many triggers --------------------------------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    """A leaf of a screened trigger: its schedule, and the events from `since` (a window)."""

    schedule_id: int
    leaf: Mapping[str, Any]
    since: datetime | None

    @property
    def key(self) -> tuple[Any, ...]:
        """What selects the leaf's events (kind, match, since): the same for every leaf that
        listens to the same events, whatever its schedule. A match value's type is part of it
        (`True == 1` in Python, not in JSON)."""
        kind, match = leaf_kind(self.leaf)
        values = tuple((path, type(v).__name__, v) for path, v in sorted(match.items()))
        return (kind, values, self.since)


def _collect(
    trigger: Mapping[str, Any], schedule_id: int, now: datetime, since: datetime | None
) -> Iterator[_Leaf]:
    """The leaves of `trigger` in `evaluate`'s order, each with the window it counts from."""
    if "window" in trigger:
        start = now - _duration(trigger["window"], "window")
        since = start if since is None else max(since, start)
    for key in ("all", "any"):
        if key in trigger:
            for part in trigger[key]:
                yield from _collect(part, schedule_id, now, since)
            return
    yield _Leaf(schedule_id, trigger, since)


def _combine(trigger: Mapping[str, Any], met: Iterator[bool]) -> bool:
    """Whether `trigger` is met, from whether each of its leaves is (in `_collect`'s order)."""
    for key in ("all", "any"):
        if key in trigger:
            parts = [_combine(part, met) for part in trigger[key]]
            return all(parts) if key == "all" else any(parts)
    return next(met)


def _selects(key: tuple[Any, ...], prefix: str = "") -> Q:
    """The condition on an event (or, with `prefix`, a related row's) of the leaves of `key`."""
    kind, values, since = key
    condition = match_condition(kind, {path: v for path, _type, v in values}, prefix)
    if since is not None:
        condition &= Q(**{f"{prefix}time__gte": since})
    return condition


def screen(triggers: Mapping[int, Mapping[str, Any]], now: datetime, using: str) -> set[int]:
    """The schedules among `triggers` (trigger by schedule id) whose trigger is met at `now`,
    as `evaluate` says, read for all of them at once instead of a query or two per leaf.

    The leaves that select the same events (kind, match and window: `_Leaf.key`) are read
    together, whatever their schedules: for each such selection, in one query for up to
    `SCREEN_LEAVES` of them (sorted by kind), the number of events and the latest one's time;
    in a second, the number each schedule consumed, by schedule. A leaf's unconsumed events are
    the difference. Reads only: a firing evaluates its trigger again, under its schedule's lock.
    """
    leaves_of = {pk: list(_collect(trigger, pk, now, None)) for pk, trigger in triggers.items()}
    keys = sorted(
        {leaf.key for found in leaves_of.values() for leaf in found},
        key=lambda key: (key[0], repr(key[1:])),
    )
    totals: dict[tuple[Any, ...], tuple[int, datetime | None]] = {}
    consumed: dict[tuple[int, tuple[Any, ...]], int] = {}
    for begin in range(0, len(keys), SCREEN_LEAVES):
        chunk = keys[begin : begin + SCREEN_LEAVES]
        kinds = sorted({key[0] for key in chunk})
        selected: dict[str, Any] = {}
        for number, key in enumerate(chunk):
            condition = _selects(key)
            selected[f"count{number}"] = Count("id", filter=condition)
            selected[f"latest{number}"] = Max("time", filter=condition)
        found = Event.objects.using(using).filter(kind__in=kinds).aggregate(**selected)
        for number, key in enumerate(chunk):
            totals[key] = (found[f"count{number}"], found[f"latest{number}"])
        by_schedule = {
            f"consumed{number}": Count("id", filter=_selects(key, "event__"))
            for number, key in enumerate(chunk)
        }
        rows = (
            Consumption.objects.using(using)
            .filter(event__kind__in=kinds)
            .values("schedule_id")
            .annotate(**by_schedule)
            .order_by()
            .values_list("schedule_id", *by_schedule)
        )
        for schedule_id, *counts in rows:
            for key, count in zip(chunk, counts, strict=True):
                if count:
                    consumed[schedule_id, key] = count

    def met(leaf: _Leaf) -> bool:
        count, latest = totals[leaf.key]
        pending = count - consumed.get((leaf.schedule_id, leaf.key), 0)
        return _leaf_met(leaf.leaf, pending, latest, now)

    return {
        pk
        for pk, trigger in triggers.items()
        if _combine(trigger, iter([met(leaf) for leaf in leaves_of[pk]]))
    }


def _leaf_met(
    leaf: Mapping[str, Any], pending: int, latest: datetime | None, now: datetime
) -> bool:
    """Whether a leaf is met with `pending` events unconsumed, the latest matching at `latest`:
    the rule of `_evaluate_leaf`."""
    if "count" in leaf:
        return bool(pending >= leaf["count"])
    if not pending:
        return False
    if "quiet" in leaf and latest is not None:
        return now - latest >= _duration(leaf["quiet"], "quiet")
    return True
