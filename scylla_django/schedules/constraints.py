"""Run constraints of a schedule: when a firing (a tick or a trigger) may submit its task.

```python
SCYLLA = {"SCHEDULES": {
    "nightly-compaction": {"every": "1h", "queue": "maintenance", "spec": {},
                           "window": "01:00-03:00", "timezone": "Europe/Malta",
                           "min_gap": "20h", "max_runs": "1/d", "max_concurrent": 1,
                           "when_unmet": "wait", "wait_timeout": "1d", "on_timeout": "cancel"},
}}
```

- `window`: one or more ranges of wall-clock time in the schedule's `timezone`, "HH:MM-HH:MM"
  (a range may cross midnight: "22:00-06:00"; "24:00" ends at midnight). A firing runs only
  inside one. In a DST gap a window opens when the gap ends; the repeated hour is inside a
  window on both passes.
- `min_gap`: at least this long since the schedule's last run ended (none while it runs).
- `max_runs`: at most N runs launched in any period, "<N>/<period>": "4/h", "1/d", "10/30m".
- `max_concurrent`: at most N runs of the schedule ready or running at once.
- `max_load`: launch only while some live worker of the schedule's queue reports a host load
  average (one minute, sent with its heartbeats) at or under this number: the cluster's load,
  as the workers see it. A queue no live worker reports for does not hold a firing back.
  `skip_if_running=True` is `max_concurrent=1` with a firing skipped while one runs.
- `when_unmet`: "wait" (the default: the firing is held in a `WaitingRun` row until every
  constraint is met) or "skip" (the firing is dropped).
- `wait_timeout` and `on_timeout`: a firing that waited this long is cancelled ("cancel", the
  default) or run anyway ("force").

While a firing waits, a later firing of the same schedule is merged into it (counted, not
queued), so a schedule never piles up runs outside its window. Every decision is taken under
the schedule row's lock (the pass that ticks it holds it), on the schedules' clock.
"""

from __future__ import annotations

import math
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.core.exceptions import ValidationError

from .. import db
from ..enums import Liveness, Status
from ..models import OnTimeout, Schedule, Task, WaitingRun, WhenUnmet, Worker, send_on_commit
from ..models.keys import parse_rate
from ..models.traces import keep_traces
from ..signals import task_submitted
from ..text import DurationError, positive_duration
from ..validation import FieldErrors

#: The constraint keys of a schedule definition, in the order forms and the API show them.
CONSTRAINT_KEYS = (
    "window",
    "min_gap",
    "max_runs",
    "max_concurrent",
    "max_load",
    "when_unmet",
    "wait_timeout",
    "on_timeout",
)
#: The largest `max_concurrent` (a run's rn is remembered per slot).
MAX_CONCURRENT = 1000
#: The largest N of `max_runs` (a launch time is remembered per run).
MAX_RUNS = 1000

_RANGE = re.compile(r"\A\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*\Z")
_DAY = 24 * 60


@dataclass(frozen=True)
class Window:
    """A range of wall-clock minutes of the day, `start` included, `end` excluded; `end` below
    `start` crosses midnight."""

    start: int
    end: int

    @property
    def text(self) -> str:
        return f"{_hhmm(self.start)}\N{EN DASH}{_hhmm(self.end)}"

    def contains(self, minute: int) -> bool:
        if self.start < self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end


def _hhmm(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def parse_window(value: object) -> tuple[Window, ...]:
    """The windows of `value`: "HH:MM-HH:MM" or a list of them. ValidationError (code
    `invalid_window`) for anything else, an empty list or a range that never opens."""
    ranges = [value] if isinstance(value, str) else value
    if not isinstance(ranges, list | tuple) or not ranges:
        raise ValidationError(
            'window must be "HH:MM-HH:MM" or a non-empty list of them, such as "01:00-03:00".',
            code="invalid_window",
        )
    windows = []
    for text in ranges:
        match = _RANGE.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValidationError(
                f'A window is "HH:MM-HH:MM" such as "01:00-03:00", not {text!r}.',
                code="invalid_window",
            )
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        if h1 > 23 or m1 > 59 or m2 > 59 or h2 > 24 or (h2 == 24 and m2):
            raise ValidationError(
                f"Window {text!r} has a time that is not on a clock (00:00 to 24:00).",
                code="invalid_window",
            )
        start, end = h1 * 60 + m1, h2 * 60 + m2
        if start == end:
            raise ValidationError(
                f"Window {text!r} never opens (it ends where it starts).",
                code="invalid_window",
            )
        windows.append(Window(start, end % _DAY))  # "00:00-24:00": all day
    return tuple(windows)


def window_texts(windows: tuple[Window, ...]) -> list[str]:
    """The windows as stored: "HH:MM-HH:MM" each."""
    return [f"{_hhmm(w.start)}-{_hhmm(w.end) if w.end else '24:00'}" for w in windows]


def _duration(key: str, value: object) -> timedelta:
    try:
        return positive_duration(value)
    except DurationError:
        raise ValidationError(
            f'{key} must be a positive duration such as "30s", "10m", "4h", not {value!r}.',
            code=f"invalid_{key}",
        ) from None


def parse_max_runs(value: object) -> tuple[int, float]:
    """`(count, seconds)` of "<N>/<period>" with N >= 1; ValidationError `invalid_max_runs`."""
    try:
        count, seconds = parse_rate(value)
    except ValidationError:
        raise ValidationError(
            f'max_runs is "<runs>/<period>" with at least one run, such as "4/h" or "1/d", '
            f"not {value!r}.",
            code="invalid_max_runs",
        ) from None
    if count > MAX_RUNS:
        raise ValidationError(
            f"max_runs allows at most {MAX_RUNS} runs per period.", code="invalid_max_runs"
        )
    return count, seconds


def clean_constraints(raw: Mapping[str, Any], errors: FieldErrors) -> dict[str, Any]:
    """The Schedule fields of the constraint keys of `raw`; each bad key is recorded in
    `errors` (the caller raises them together with its own)."""
    fields: dict[str, Any] = {
        "window": [],
        "min_gap": None,
        "max_runs": "",
        "max_concurrent": None,
        "max_load": None,
        "when_unmet": WhenUnmet.WAIT,
        "wait_timeout": None,
        "on_timeout": OnTimeout.CANCEL,
    }
    check = errors.check
    if raw.get("window") is not None:
        windows = check("window", parse_window, raw["window"])
        fields["window"] = window_texts(windows) if windows else []
    if raw.get("min_gap") is not None:
        fields["min_gap"] = check("min_gap", lambda v: _duration("min_gap", v), raw["min_gap"])
    max_runs = raw.get("max_runs")
    if max_runs not in (None, "") and check("max_runs", parse_max_runs, max_runs) is not None:
        fields["max_runs"] = str(max_runs).strip()
    concurrent = raw.get("max_concurrent")
    if concurrent is not None:
        if (
            isinstance(concurrent, bool)
            or not isinstance(concurrent, int)
            or not 1 <= concurrent <= MAX_CONCURRENT
        ):
            errors["max_concurrent"] = ValidationError(
                f"max_concurrent must be a whole number from 1 to {MAX_CONCURRENT}, "
                f"not {concurrent!r}.",
                code="invalid_max_concurrent",
            )
        else:
            fields["max_concurrent"] = concurrent
        if raw.get("skip_if_running"):
            errors["max_concurrent"] = ValidationError(
                "Give max_concurrent or skip_if_running (which is max_concurrent=1 with "
                'when_unmet="skip"), not both.',
                code="skip_if_running_and_max_concurrent",
            )
    load = raw.get("max_load")
    if load is not None:
        if (
            isinstance(load, bool)
            or not isinstance(load, int | float)
            or not math.isfinite(load)
            or load <= 0
        ):
            errors["max_load"] = ValidationError(
                f"max_load must be a positive number (a load average), not {load!r}.",
                code="invalid_max_load",
            )
        else:
            fields["max_load"] = float(load)
    for key, choices in (("when_unmet", WhenUnmet), ("on_timeout", OnTimeout)):
        value = raw.get(key)
        if value is None:
            continue
        if value not in choices.values:
            errors[key] = ValidationError(
                f"{key} must be one of {', '.join(choices.values)}, not {value!r}.",
                code=f"invalid_{key}",
            )
        else:
            fields[key] = str(value)
    if raw.get("wait_timeout") is not None:
        fields["wait_timeout"] = check(
            "wait_timeout", lambda v: _duration("wait_timeout", v), raw["wait_timeout"]
        )
    return fields


# -- evaluation ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constraints:
    """The run constraints of one schedule, parsed."""

    windows: tuple[Window, ...] = ()
    timezone: str = "UTC"
    min_gap: timedelta | None = None
    max_runs: tuple[int, float] | None = None
    max_runs_text: str = ""
    max_concurrent: int | None = None
    max_load: float | None = None
    when_unmet: str = WhenUnmet.WAIT
    wait_timeout: timedelta | None = None
    on_timeout: str = OnTimeout.CANCEL
    skip_if_running: bool = False

    @classmethod
    def of(cls, schedule: Schedule) -> Constraints:
        """The constraints of a Schedule row (`skip_if_running` as max_concurrent=1)."""
        concurrent = schedule.max_concurrent
        if schedule.skip_if_running and concurrent is None:
            concurrent = 1
        return cls(
            windows=parse_window(schedule.window) if schedule.window else (),
            timezone=schedule.timezone,
            min_gap=schedule.min_gap,
            max_runs=parse_max_runs(schedule.max_runs) if schedule.max_runs else None,
            max_runs_text=schedule.max_runs,
            max_concurrent=concurrent,
            max_load=schedule.max_load,
            when_unmet=schedule.when_unmet,
            wait_timeout=schedule.wait_timeout,
            on_timeout=schedule.on_timeout,
            skip_if_running=schedule.skip_if_running,
        )

    @property
    def any(self) -> bool:
        return bool(
            self.windows
            or self.min_gap
            or self.max_runs
            or self.max_concurrent is not None
            or self.max_load is not None
        )

    @property
    def window_text(self) -> str:
        return ", ".join(w.text for w in self.windows)

    def in_window(self, moment: datetime) -> bool:
        """Whether `moment` is inside a window (always, without windows)."""
        if not self.windows:
            return True
        local = moment.astimezone(zoneinfo.ZoneInfo(self.timezone))
        minute = local.hour * 60 + local.minute
        return any(w.contains(minute) for w in self.windows)

    def window_opens(self, after: datetime) -> datetime:
        """The first moment at or after `after` inside a window, in UTC."""
        if self.in_window(after):
            return after
        zone = zoneinfo.ZoneInfo(self.timezone)
        day = after.astimezone(zone).date()
        candidates = []
        for offset in range(3):
            for w in self.windows:
                wall = datetime.combine(day + timedelta(days=offset), time()) + timedelta(
                    minutes=w.start
                )
                moment = _first_instant(wall, zone)
                if moment > after:
                    candidates.append(moment)
        return min(candidates)


def _first_instant(wall: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """The first instant (UTC) whose wall-clock time in `zone` is `wall` or later: `wall` itself
    (its first pass if repeated), or the end of the DST gap `wall` falls in."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        return min(first, second)
    # In a gap: the gap ends at the transition, between the two readings of `wall`.
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    moment = low
    while moment.astimezone(zone).replace(tzinfo=None) < wall:
        moment += timedelta(minutes=1)
    return moment


def least_worker_load(queue: str, using: str) -> float | None:
    """The least host load that an alive worker of `queue` reported with its heartbeat (None:
    none reported one)."""
    rows = (
        Worker.objects.using(using)
        .in_state(Liveness.ALIVE)
        .filter(load__isnull=False)
        .values_list("queues", "load")
    )
    loads = [
        float(load)
        for queues, load in rows
        if load is not None and isinstance(queues, list) and queue in queues
    ]
    return min(loads) if loads else None


@dataclass(frozen=True)
class Unmet:
    """A constraint unmet now: its `code`, what a person reads, and the soonest it can be met
    (None: the monitor looks again at every pass)."""

    code: str
    detail: str
    until: datetime | None = None


class _Unread:
    """A gate's `waiting` before it is read."""


@dataclass
class Gate:
    """The constraints of one locked schedule at `now`, with what they remember: built by the
    pass that holds the schedule's lock, asked for each firing, then `save()`d."""

    schedule: Schedule
    now: datetime
    using: str
    #: The schedule's waiting firing when the caller read it already (`prefetch`).
    waiting: WaitingRun | _Unread | None = field(default_factory=lambda: _Unread())
    #: Status and last write of the tasks the constraints look at, by rn, when the caller read
    #: them already (`prefetch`); None: the gate reads what it needs.
    known: Mapping[str, tuple[str, datetime]] | None = None
    constraints: Constraints = field(init=False)
    #: The tasks the gate's firings submit, inserted by `save`.
    tasks: list[Task] = field(default_factory=list, init=False)
    #: The traceparents of those tasks, by rn, stored beside them by `save`.
    traces: dict[str, str] = field(default_factory=dict, init=False)
    #: The schedule fields to write (set on `schedule` too), by `save`.
    changed: set[str] = field(default_factory=set, init=False)
    #: What `save` writes of the waiting firing: "new" (insert it), "merged" (a count to add),
    #: "recheck" (its recheck, reason and code), "delete".
    waiting_changes: dict[str, Any] = field(default_factory=dict, init=False)
    _active: list[str] | None = field(default=None, init=False)
    _launches: list[datetime] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.constraints = Constraints.of(self.schedule)

    def held(self) -> WaitingRun | None:
        """The firing of the schedule that waits for its constraints, if any."""
        if isinstance(self.waiting, _Unread):
            self.waiting = held(self.schedule, self.using)
        return self.waiting

    def set(self, **values: Any) -> None:
        """Set fields of the schedule, written by `save`."""
        for key, value in values.items():
            setattr(self.schedule, key, value)
        self.changed.update(values)

    def _tasks(self, rns: list[str]) -> dict[str, tuple[str, datetime]]:
        if self.known is not None:
            return {rn: self.known[rn] for rn in rns if rn in self.known}
        rows = Task.objects.using(self.using).filter(rn__in=rns)
        return {r: (st, up) for r, st, up in rows.values_list("rn", "status", "updated")}

    # What the constraints remember, read once and pruned.

    def active(self) -> list[str]:
        if self._active is None:
            remembered = list(self.schedule.active or [])
            if self.schedule.last_task and self.schedule.last_task not in remembered:
                remembered.append(self.schedule.last_task)  # e.g. a "Run now"
            found = self._tasks(remembered) if remembered else {}
            live = {rn for rn, (status, _) in found.items() if status in ACTIVE}
            self._active = [rn for rn in remembered if rn in live]
            if self._active != list(self.schedule.active or []):
                self.set(active=list(self._active))
        return self._active

    def launches(self) -> list[datetime]:
        if self._launches is None:
            times = [datetime.fromisoformat(t) for t in self.schedule.launches or []]
            if self.constraints.max_runs is None:
                kept: list[datetime] = []
            else:
                period = timedelta(seconds=self.constraints.max_runs[1])
                kept = [t for t in times if t > self.now - period]
            self._launches = kept
            if len(kept) != len(times):
                self.set(launches=[t.isoformat() for t in kept])
        return self._launches

    def unmet(self) -> list[Unmet]:
        """Every constraint unmet at `now`, with what it waits for."""
        c = self.constraints
        found: list[Unmet] = []
        if c.windows and not c.in_window(self.now):
            found.append(
                Unmet(
                    "window",
                    f"waiting for window {c.window_text} ({c.timezone})",
                    c.window_opens(self.now),
                )
            )
        if c.max_concurrent is not None and len(self.active()) >= c.max_concurrent:
            found.append(
                Unmet(
                    "max_concurrent",
                    f"{len(self.active())} run(s) ready or running, max_concurrent is "
                    f"{c.max_concurrent}",
                )
            )
        if c.min_gap is not None:
            found.extend(self._min_gap(c.min_gap))
        if c.max_load is not None:
            found.extend(self._max_load(c.max_load))
        if c.max_runs is not None:
            count, seconds = c.max_runs
            launches = self.launches()
            if len(launches) >= count:
                oldest = sorted(launches)[len(launches) - count]
                found.append(
                    Unmet(
                        "max_runs",
                        f"{len(launches)} run(s) launched in the last period, max_runs is "
                        f"{c.max_runs_text}",
                        oldest + timedelta(seconds=seconds),
                    )
                )
        return found

    def _max_load(self, limit: float) -> list[Unmet]:
        queue = self.schedule.queue
        least = least_worker_load(queue, self.using)
        if least is None or least <= limit:
            return []
        return [
            Unmet(
                "max_load",
                f"the workers of queue {queue} are loaded: the least load is {least:.2f}, "
                f"max_load is {limit:g}",
            )
        ]

    def _min_gap(self, gap: timedelta) -> list[Unmet]:
        rn = self.schedule.last_task
        if not rn:
            return []
        if any(task.rn == rn for task in self.tasks):  # submitted by this gate, not yet saved
            return [Unmet("min_gap", f"the last run {rn} has not ended (min_gap {gap})")]
        row = self._tasks([rn]).get(rn)
        if row is None:  # purged: it ended long ago
            return []
        status, updated = row
        if status in ACTIVE:
            return [Unmet("min_gap", f"the last run {rn} has not ended (min_gap {gap})")]
        ends = updated + gap
        if self.now < ends:
            return [
                Unmet(
                    "min_gap",
                    f"the last run ended at {updated:%Y-%m-%d %H:%M:%S} UTC, min_gap is {gap}",
                    ends,
                )
            ]
        return []

    def launched(self, task: Task, fired: datetime, traceparent: str | None = None) -> None:
        """A firing at `fired` submits `task` (inserted by `save`, with its `traceparent`):
        the schedule's last run."""
        self.tasks.append(task)
        if traceparent is not None:
            self.traces[task.rn] = traceparent
        self.set(last_run=fired, last_task=task.rn)
        if self.constraints.max_concurrent is not None:
            self.active().append(task.rn)
            self.set(active=list(self.active()))
        if self.constraints.max_runs is not None:
            self.launches().append(self.now)
            self.set(launches=[t.isoformat() for t in self.launches()])

    def save(self, **values: Any) -> list[Task]:
        """Insert the tasks of the firings and write the schedule's changed fields and
        `values`: `save_all([self])`."""
        self.set(**values)
        return save_all([self], self.using)

    # Decisions.

    def skips(self, problems: list[Unmet]) -> bool:
        """Whether a firing with these unmet constraints is dropped rather than held."""
        if self.constraints.when_unmet == WhenUnmet.SKIP:
            return True
        # skip_if_running: a firing while the previous one runs is skipped.
        return self.constraints.skip_if_running and any(
            p.code == "max_concurrent" for p in problems
        )

    def hold(self, rn: str, fired: datetime, spec: Any, problems: list[Unmet]) -> WaitingRun:
        """Hold a firing in a WaitingRun row (the caller made sure none is held)."""
        c = self.constraints
        deadline = None if c.wait_timeout is None else self.now + c.wait_timeout
        self.waiting = WaitingRun(
            schedule=self.schedule,
            rn=rn,
            fired=fired,
            spec=spec,
            since=self.now,
            deadline=deadline,
            **self.recheck_fields(problems, deadline),
        )
        self.waiting_changes = {"new": True}
        return self.waiting

    def merge(self) -> None:
        """A later firing merges into the one that waits (counted)."""
        waiting = self.held()
        if waiting is None:
            raise RuntimeError(f"schedule {self.schedule.name!r} has no waiting firing")
        waiting.merged += 1
        self.waiting_changes.setdefault("merged", 0)
        self.waiting_changes["merged"] += 1

    def still_waits(self, problems: list[Unmet]) -> None:
        """The waiting firing's constraints are still unmet: when to look again, and why."""
        waiting = self.held()
        if waiting is None:
            raise RuntimeError(f"schedule {self.schedule.name!r} has no waiting firing")
        fields = self.recheck_fields(problems, waiting.deadline)
        for key, value in fields.items():
            setattr(waiting, key, value)
        self.waiting_changes["recheck"] = True

    def drop_waiting(self) -> None:
        """The waiting firing is released, cancelled or forced: its row goes."""
        self.waiting_changes = {"delete": True}

    def recheck_fields(self, problems: list[Unmet], deadline: datetime | None) -> dict[str, Any]:
        """`recheck`, `reason` and `code` of a held firing with these unmet constraints."""
        untils = [p.until for p in problems]
        if any(u is None for u in untils) or not untils:
            recheck = self.now + timedelta(microseconds=1)  # look again at the next pass
        else:
            recheck = max(u for u in untils if u is not None)
        if deadline is not None:
            recheck = min(recheck, deadline)
        return {
            "recheck": recheck,
            "reason": "; ".join(p.detail for p in problems),
            "code": problems[0].code if problems else "",
        }


#: The statuses of a run that has not ended.
ACTIVE = (Status.READY, Status.RUNNING)


def prefetch(schedules: list[Schedule], now: datetime, using: str) -> dict[int, Gate]:
    """A gate for each of `schedules` (locked by the caller), with their waiting firings and
    the tasks their constraints look at read in two queries for all of them."""
    waiting = WaitingRun.objects.using(using).in_bulk(
        [s.pk for s in schedules], field_name="schedule_id"
    )
    gates = {s.pk: Gate(s, now, using, waiting=waiting.get(s.pk), known={}) for s in schedules}
    rns: set[str] = set()
    for gate in gates.values():
        c = gate.constraints
        if c.max_concurrent is not None:
            rns.update(gate.schedule.active or [])
        if (c.max_concurrent is not None or c.min_gap is not None) and gate.schedule.last_task:
            rns.add(gate.schedule.last_task)
    known: dict[str, tuple[str, datetime]] = {}
    if rns:
        rows = Task.objects.using(using).filter(rn__in=sorted(rns))
        known = {r: (st, up) for r, st, up in rows.values_list("rn", "status", "updated")}
    for gate in gates.values():
        gate.known = known
    return gates


def save_all(gates: list[Gate], using: str) -> list[Task]:
    """Insert the tasks of the gates' firings (once each: rns are unique; `task_submitted` is
    sent on commit) and write the schedules' changed fields: one INSERT and one UPDATE for all
    of them. Returns the tasks."""
    tasks = [task for gate in gates for task in gate.tasks]
    if tasks:
        Task.objects.using(using).bulk_create(tasks, ignore_conflicts=True, batch_size=500)
        keep_traces(using, {rn: tp for gate in gates for rn, tp in gate.traces.items()})
    _write_schedules([gate for gate in gates if gate.changed], using)
    _write_waiting(gates, using)
    for gate in gates:
        gate.tasks, gate.changed, gate.traces = [], set(), {}
    for task in tasks:
        send_on_commit(task_submitted, using, task=task)
    return tasks


def _write_waiting(gates: list[Gate], using: str) -> None:
    """The gates' waiting firings: new ones inserted, released ones deleted, the others'
    merge counts and rechecks written, a statement each for all the gates."""
    new, gone, merged, rechecked = [], [], [], []
    for gate in gates:
        changes, waiting = gate.waiting_changes, gate.waiting
        gate.waiting_changes = {}
        if not changes or not isinstance(waiting, WaitingRun):
            continue
        if changes.get("delete"):
            gone.append(waiting.pk)
        elif changes.get("new"):
            new.append(waiting)
        else:
            if changes.get("merged"):
                merged.append((changes["merged"], waiting.pk))
            if changes.get("recheck"):
                rechecked.append(waiting)
    manager = WaitingRun.objects.using(using)
    if gone:
        manager.filter(pk__in=gone).delete()
    if new:
        manager.bulk_create(new)
    db.add_each(WaitingRun, "merged", merged, using)
    db.update_each(rechecked, ["recheck", "reason", "code"], using)


def _write_schedules(gates: list[Gate], using: str) -> None:
    """The changed fields of the gates' schedules, `updated` on the database clock: one
    statement for all of them (`db.update_each`)."""
    if not gates:
        return
    names = sorted(set().union(*(gate.changed for gate in gates)) - {"updated"})
    db.update_each([gate.schedule for gate in gates], names, using, stamp="updated")


def held(schedule: Schedule, using: str | None = None) -> WaitingRun | None:
    """The firing of `schedule` waiting for its constraints, if any."""
    return WaitingRun.objects.using(using or schedule._state.db).filter(schedule=schedule).first()


def why(schedule: Schedule, now: datetime, using: str | None = None) -> list[Unmet]:
    """The constraints of `schedule` unmet at `now` ("why didn't it fire?"); reads only."""
    gate = Gate(schedule, now, using or schedule._state.db or "default")
    return gate.unmet()
