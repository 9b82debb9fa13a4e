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
parts); with `window: D`, only events of the last D count.

At the top of a trigger (a leaf or a group):

- `with_events: true` adds the consumed events to the task's spec (`"events": [{"id", "kind",
  "payload", "time"}]`);
- `since`: which events count. `"change"` (the default): those after the schedule's
  watermark, set when the schedule was created and each time its trigger changed (`Mark`: the
  newest event's id then, and the database time), so that a new or changed trigger does not
  fire at once on events from before it; `"all"`: every event no firing of the schedule
  consumed, older ones included;
- `delay: D`: a met trigger fires at once (its events consumed) but its firing waits D before
  it goes through the run constraints (`schedules.firings`: a `delayed` firing, `due`).

A kind no event has yet is allowed (the events may come later); a malformed match, an empty
`all`/`any`, a count below one, a duration that is not positive, a `since` other than
"change" and "all", or a top-level key in a part are refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Count, Max, Q, QuerySet
from django.utils.translation import gettext as _

from ..durations import short
from ..models import Consumption, Event
from ..text import DurationError, positive_duration
from ..validation import validate_queue
from .events import (
    TASK_KIND_PREFIX,
    match_condition,
    matching,
    unconsumed,
    validate_kind,
    validate_match,
)

#: Most events one firing consumes (the rest fire the next one).
MAX_EVENTS = 1000
#: Most selections of events (leaves' kind, match and window) `screen` reads in one query (two
#: columns each: the databases cap both the columns and the parameters of a query).
SCREEN_LEAVES = 200
#: The statuses an `on_task` trigger may listen to.
TASK_STATUSES = ("completed", "aborted", "cancelled")

#: What `since` may say: count from the schedule's watermark (the default), or every event.
SINCE_CHANGE = "change"
SINCE_ALL = "all"

_LEAF_KEYS = {"on_event", "on_task", "status", "match", "count", "quiet"}
_GROUP_KEYS = {"all", "any", "window"}
#: The keys of the whole trigger, at its top only.
_TOP_KEYS = ("with_events", "since", "delay")


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
        since = raw.pop("since", SINCE_CHANGE)
        if since not in (SINCE_CHANGE, SINCE_ALL):
            raise _invalid(
                f'since must be "{SINCE_CHANGE}" (the default: the events after the schedule '
                f'was created or its trigger changed) or "{SINCE_ALL}" (every event not yet '
                f"consumed), not {since!r}.",
                "invalid_since",
            )
        delay = raw.pop("delay", None)
        if delay is not None:
            _duration(delay, "delay")
        cleaned = clean_trigger(raw, top=False)
        if with_events:
            cleaned["with_events"] = True
        if since == SINCE_ALL:
            cleaned["since"] = SINCE_ALL
        if delay is not None:
            cleaned["delay"] = delay
        return cleaned
    misplaced = sorted(set(raw) & set(_TOP_KEYS))
    if misplaced:
        raise _invalid(
            f"{', '.join(misplaced)} goes at the top of a trigger (it is about the whole "
            "trigger), not in a part.",
            "invalid_trigger",
        )
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


@dataclass(frozen=True)
class Mark:
    """A schedule's watermark: its trigger counts the events after the event `after` (an id)
    and from `time` on (the database time its trigger was set). Ids alone would count a task
    event the monitor writes after the change for a task that finished before it; the time
    alone could not tell an event of the same millisecond (SQLite's clock) before from after.
    """

    after: int
    time: datetime

    def events(self, events: QuerySet[Event]) -> QuerySet[Event]:
        """`events` that the trigger counts."""
        return events.filter(id__gt=self.after, time__gte=self.time)


def mark_of(
    trigger: Mapping[str, Any], counts_after: int | None, counts_from: datetime | None
) -> Mark | None:
    """The watermark a schedule's `trigger` counts from, from its `counts_after` and
    `counts_from` (None: every unconsumed event counts, with `since: "all"` or no watermark)."""
    if trigger.get("since") == SINCE_ALL or counts_after is None or counts_from is None:
        return None
    return Mark(counts_after, counts_from)


def delay_of(trigger: Mapping[str, Any]) -> timedelta | None:
    """How long a firing of `trigger` waits before its run constraints (None: no delay)."""
    delay = trigger.get("delay")
    return None if delay is None else _duration(delay, "delay")


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
    mark: Mark | None = None,
) -> State:
    """The state of `trigger` for the schedule `schedule_id` at `now` (the database clock),
    counting only events from `since` (a window) when given, and only those after the
    schedule's watermark `mark` when given (`mark_of`)."""
    if "window" in trigger:
        start = now - _duration(trigger["window"], "window")
        since = start if since is None else max(since, start)
    for key in ("all", "any"):
        if key in trigger:
            states = [evaluate(part, schedule_id, now, using, since, mark) for part in trigger[key]]
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
    return _evaluate_leaf(trigger, schedule_id, now, using, since, mark)


def _evaluate_leaf(
    leaf: Mapping[str, Any],
    schedule_id: int,
    now: datetime,
    using: str,
    since: datetime | None,
    mark: Mark | None,
) -> State:
    kind, match = leaf_kind(leaf)
    events = matching(kind, match, using)
    if since is not None:
        events = events.filter(time__gte=since)
    counted = events if mark is None else mark.events(events)
    pending = unconsumed(counted, schedule_id).order_by("id")
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
    """A leaf of a screened trigger: its schedule, the events from `since` (a window), and
    with `mark`, only those after the schedule's watermark."""

    schedule_id: int
    leaf: Mapping[str, Any]
    since: datetime | None
    mark: Mark | None = None

    @property
    def key(self) -> tuple[Any, ...]:
        """What selects the leaf's events (kind, match, since, and the event id they come
        after): the same for every leaf that listens to the same events, whatever its
        schedule. A match value's type is part of it (`True == 1` in Python, not in JSON)."""
        kind, match = leaf_kind(self.leaf)
        values = tuple((path, type(v).__name__, v) for path, v in sorted(match.items()))
        since, after = self.since, None
        if self.mark is not None:
            since = self.mark.time if since is None else max(since, self.mark.time)
            after = self.mark.after
        return (kind, values, since, after)


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
    kind, values, since, after = key
    condition = match_condition(kind, {path: v for path, _type, v in values}, prefix)
    if since is not None:
        condition &= Q(**{f"{prefix}time__gte": since})
    if after is not None:
        condition &= Q(**{f"{prefix}id__gt": after})
    return condition


def screen(
    triggers: Mapping[int, Mapping[str, Any]],
    now: datetime,
    using: str,
    marks: Mapping[int, Mark | None] | None = None,
) -> set[int]:
    """The schedules among `triggers` (trigger by schedule id) whose trigger is met at `now`,
    counting from their watermarks (`marks`, by schedule id), as `evaluate` says, read for all
    of them at once instead of a query or two per leaf.

    The leaves that select the same events (kind, match and window: `_Leaf.key`) are read
    together, whatever their schedules: for each such selection, in one query for up to
    `SCREEN_LEAVES` of them (sorted by kind), the number of events and the latest one's time;
    in a second, the number each schedule consumed, by schedule. A leaf's unconsumed events are
    the difference. Reads only: a firing evaluates its trigger again, under its schedule's lock.

    Watermarks differ from schedule to schedule, so they are left out of the first reading: a
    watermark only leaves events out (a `quiet` leaf waits for the latest event, counted or
    not), so a trigger unmet without it is unmet. The triggers met without it, which are few,
    are read again with it.
    """
    leaves_of = {pk: list(_collect(trigger, pk, now, None)) for pk, trigger in triggers.items()}
    counts = _read_counts(leaves_of, using)

    def met(pk: int, found: list[_Leaf], marked: _Counts) -> bool:
        flags = []
        for leaf, unmarked in zip(found, leaves_of[pk], strict=True):
            count, _latest = marked.totals[leaf.key]
            pending = count - marked.consumed.get((pk, leaf.key), 0)
            flags.append(_leaf_met(leaf.leaf, pending, counts.totals[unmarked.key][1], now))
        return _combine(triggers[pk], iter(flags))

    found = {pk for pk, leaves in leaves_of.items() if met(pk, leaves, counts)}
    with_marks = {
        pk: [replace(leaf, mark=mark) for leaf in leaves_of[pk]]
        for pk in found
        if (mark := (marks or {}).get(pk)) is not None
    }
    if not with_marks:
        return found
    again = _read_counts(with_marks, using)
    return {pk for pk in found if pk not in with_marks or met(pk, with_marks[pk], again)}


@dataclass
class _Counts:
    """What `screen` read of a set of selections (`_Leaf.key`): the number of matching events
    and the latest one's time, by selection; the number each schedule consumed, by (schedule
    id, selection)."""

    totals: dict[tuple[Any, ...], tuple[int, datetime | None]]
    consumed: dict[tuple[int, tuple[Any, ...]], int]


def _read_counts(leaves_of: Mapping[int, list[_Leaf]], using: str) -> _Counts:
    """The counts of the selections of these leaves: two queries per `SCREEN_LEAVES` of them."""
    keys = sorted(
        {leaf.key for found in leaves_of.values() for leaf in found},
        key=lambda key: (key[0], repr(key[1:])),
    )
    counts = _Counts({}, {})
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
            counts.totals[key] = (found[f"count{number}"], found[f"latest{number}"])
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
        for schedule_id, *numbers in rows:
            for key, number in zip(chunk, numbers, strict=True):
                if number:
                    counts.consumed[schedule_id, key] = number
    return counts


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
