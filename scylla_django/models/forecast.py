"""When will a ready task start: a forecast from the rules in force, and the rule that decides.

`forecast(task)` reads, on the database and at once, everything that stands between a ready
task and its lease — its `not_before` or parents, its queue (paused, `max_running`), the live
workers' slots that serve its queue, its limits, exclusive locks, order key and rate — and the
run times measured on its queue (the last completed tasks' lease-to-finish times). For each
rule it plays the lease forward: the tasks ahead of this one under that rule (in the lease's
order: priority, then age) take its free places as the running ones finish, each running for
the measured time. The latest of those starts is the forecast, and the rule that gives it is
the bottleneck ("limit stripe 3/3: about 4 min").

It is a forecast, not a promise: it assumes run times like the recent ones, a steady set of
workers, and no new task overtaking this one (a higher priority submitted later does). A
rule that cannot be played forward (a paused queue, no live worker, parents not completed,
no run time measured yet) makes the forecast unknown and is named as the bottleneck.

`what_if` changes the rules for the forecast only ("limit stripe were 6"): see `WhatIf`.
Nothing is written.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import OuterRef, Q, QuerySet, Subquery

from .. import db
from ..db import due, unexpired
from ..durations import short
from ..enums import EventType, Liveness, Status
from .dependencies import AFTER_PARENTS
from .history import History
from .keys import Key, Limit, Rate
from .processes import Worker
from .queues import QueueSetting

#: Completed tasks of a queue whose run times make its measured run time.
SAMPLES = 50
#: How far back those are looked for.
SAMPLE_WINDOW = timedelta(hours=1)
#: Tasks ahead played forward one by one; beyond, the rest is added at the full pace.
PLAYED = 10_000
#: Tasks ahead counted at most (a count that reaches it says "at least").
COUNTED = 1_000_000


#: The what-if's names besides `limit.<name>`.
WHAT_IF_NAMES = ("max_running", "workers", "run_time")


@dataclass(frozen=True)
class WhatIf:
    """Rules changed for a forecast only: limit sizes by name (`limit.stripe=6`), the
    queue's `max_running`, the worker slots serving the queue (`workers`), the run time in
    seconds (`run_time`)."""

    limits: Mapping[str, int] = field(default_factory=dict)
    max_running: int | None = None
    workers: int | None = None
    run_time: float | None = None

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> WhatIf:
        """A WhatIf from query parameters or a JSON body (`{"limit.stripe": 6, "workers":
        8}`); ValidationError naming the bad entry."""
        limits: dict[str, int] = {}
        other: dict[str, Any] = {}
        for name, raw in values.items():
            if name.startswith("limit."):
                limits[name[6:]] = _positive_int(name, raw)
            elif name in ("max_running", "workers"):
                other[name] = _positive_int(name, raw)
            elif name == "run_time":
                try:
                    seconds = float(raw)
                except (TypeError, ValueError):
                    seconds = -1.0
                if not 0 < seconds <= 1e9:
                    raise ValidationError({name: "a number of seconds above 0."}, code="invalid")
                other[name] = seconds
            else:
                raise ValidationError(
                    {name: "Unknown what-if: use limit.<name>, max_running, workers or run_time."},
                    code="unknown_field",
                )
        return cls(limits=limits, **other)

    def __bool__(self) -> bool:
        return bool(self.limits) or any(
            v is not None for v in (self.max_running, self.workers, self.run_time)
        )

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {f"limit.{k}": v for k, v in self.limits.items()}
        for name in ("max_running", "workers", "run_time"):
            if (value := getattr(self, name)) is not None:
                found[name] = value
        return found


def _positive_int(name: str, raw: object) -> int:
    try:
        value = int(str(raw)) if not isinstance(raw, bool) else -1
    except ValueError:
        value = -1
    if not 1 <= value <= 1_000_000:
        raise ValidationError({name: "an integer from 1 to 1000000."}, code="invalid")
    return value


@dataclass(frozen=True)
class Rule:
    """One rule between a ready task and its start, played forward.

    `kind` and `name` say which ("limit", "stripe"); `capacity` its places (None: not a
    number of places: a rate, a date), `running` the places taken now, `ahead` the ready
    tasks before this one under it, `wait` the seconds until it lets this task start (None:
    unknown), `detail` all that in words.
    """

    kind: str
    name: str
    capacity: int | None
    running: int
    ahead: int
    wait: float | None
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "capacity": self.capacity,
            "running": self.running,
            "ahead": self.ahead,
            "wait": self.wait,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Forecast:
    """When a task is expected to start (`starts_at`, `wait` seconds from `now`; None when
    unknown or not ready), the `bottleneck` rule that decides it, every rule looked at,
    the run time used (`run_time` seconds, from `samples` completed tasks), and the what-if
    it was made under."""

    rn: str
    status: str
    now: datetime
    starts_at: datetime | None
    wait: float | None
    bottleneck: Rule | None
    rules: list[Rule]
    run_time: float | None
    samples: int
    what_if: WhatIf
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {
            "rn": self.rn,
            "status": self.status,
            "now": self.now.isoformat(),
            "starts_at": None if self.starts_at is None else self.starts_at.isoformat(),
            "wait": self.wait,
            "bottleneck": None if self.bottleneck is None else self.bottleneck.as_json(),
            "rules": [r.as_json() for r in self.rules],
            "run_time": self.run_time,
            "samples": self.samples,
            "what_if": self.what_if.as_json(),
            "detail": self.detail,
        }


def slot_wait(capacity: int, remaining: Sequence[float], ahead: int, run_time: float) -> float:
    """Seconds until the task `ahead` places back gets one of `capacity` places, when the
    running tasks end in `remaining` seconds and every later one runs `run_time` seconds."""
    ends = sorted(max(r, 0.0) for r in remaining)
    heapq.heapify(ends)
    now = 0.0
    played = min(ahead, PLAYED)
    for _ in range(played):
        while len(ends) >= capacity:
            now = max(now, heapq.heappop(ends))
        heapq.heappush(ends, now + run_time)
    while len(ends) >= capacity:
        now = max(now, heapq.heappop(ends))
    return now + (ahead - played) * run_time / capacity


def rate_wait(count: int, seconds: float, starts: Sequence[float], ahead: int) -> float:
    """Seconds until the task `ahead` starts back may start under a rate of `count` starts
    in any `seconds`, given the window's `starts` (seconds ago, as negative offsets)."""
    window = sorted(starts)
    now = 0.0
    for _ in range(min(ahead, PLAYED) + 1):
        if len(window) >= count:
            now = max(now, window[-count] + seconds)
        window.append(now)
    extra = max(ahead - PLAYED, 0)
    return now + extra * seconds / count


def _in_words(seconds: float) -> str:
    if seconds < 1:
        return "now"
    return "about " + short(round(seconds))


def forecast(task: Any, what_if: WhatIf | None = None) -> Forecast:
    """The forecast of `task`'s start (see the module); reads only."""
    what_if = what_if or WhatIf()
    using = task._state.db or "default"
    tasks = type(task)._default_manager.using(using)
    now = db.read_clock(using)
    measured = run_times(tasks, task.queue)
    run_time = what_if.run_time or (statistics.fmean(measured) if measured else None)

    def done(status_detail: str, starts_at: datetime | None = None) -> Forecast:
        return Forecast(
            task.rn,
            task.status,
            now,
            starts_at,
            None,
            None,
            [],
            run_time,
            len(measured),
            what_if,
            status_detail,
        )

    if task.status == Status.RUNNING:
        started = lease_starts(tasks.filter(pk=task.pk)).get(task.pk)
        return done(f"running since {started}", started)
    if task.status != Status.READY:
        return done(f"{task.status}: it will not start")
    rules = [r for r in _rules(task, tasks, now, run_time, what_if) if r is not None]
    unknown = next((r for r in rules if r.wait is None), None)
    if unknown is not None:
        return Forecast(
            task.rn,
            task.status,
            now,
            None,
            None,
            unknown,
            rules,
            run_time,
            len(measured),
            what_if,
            unknown.detail,
        )
    # On a tie, the rule of the task's own (a limit, a lock, ...) over the queue's and the
    # workers': it is the one a what-if would change.
    bottleneck = max(
        rules,
        key=lambda r: (
            r.wait or 0.0,
            ("workers", "queue").index(r.kind) - 2 if r.kind in ("workers", "queue") else 0,
        ),
        default=None,
    )
    wait = 0.0 if bottleneck is None else bottleneck.wait or 0.0
    detail = bottleneck.detail if bottleneck is not None and wait > 0 else "may start now"
    return Forecast(
        task.rn,
        task.status,
        now,
        now + timedelta(seconds=wait),
        wait,
        bottleneck,
        rules,
        run_time,
        len(measured),
        what_if,
        detail,
    )


def ahead_of(ready: QuerySet[Any], task: Any) -> QuerySet[Any]:
    """The tasks of `ready` the lease takes before `task`: higher priority, or as high and
    older (the lease's order: priority, created, id)."""
    return ready.filter(
        Q(priority__gt=task.priority)
        | Q(priority=task.priority, created__lt=task.created)
        | Q(priority=task.priority, created=task.created, pk__lt=task.pk)
    )


def _count(tasks: QuerySet[Any]) -> int:
    return int(tasks.order_by()[:COUNTED].count())


def lease_starts(running: QuerySet[Any]) -> dict[int, datetime]:
    """When each task of `running` began its current lease (its last TaskAssignment)."""
    last = History.objects.filter(task=OuterRef("pk"), typ=EventType.ASSIGNMENT).order_by("-id")
    return {
        pk: started
        for pk, started in running.order_by()
        .annotate(started=Subquery(last.values("time")[:1]))
        .values_list("pk", "started")
        if started is not None
    }


def run_times(tasks: QuerySet[Any], queue: str) -> list[float]:
    """The run times (seconds from the start of the last lease to completion) of the last
    `SAMPLES` tasks of `queue` completed within `SAMPLE_WINDOW`."""
    recent = tasks.filter(
        queue=queue, status=Status.COMPLETED, updated__gte=db.now_plus(-SAMPLE_WINDOW)
    ).order_by("-updated")[:SAMPLES]
    ended = dict(recent.values_list("pk", "updated"))
    starts = lease_starts(tasks.filter(pk__in=list(ended)))
    return [
        (ended[pk] - started).total_seconds()
        for pk, started in starts.items()
        if ended[pk] >= started
    ]


def _remaining(
    tasks: QuerySet[Any], running: QuerySet[Any], now: datetime, run_time: float
) -> list[float]:
    starts = lease_starts(running)
    return [run_time - (now - started).total_seconds() for started in starts.values()]


def _rules(
    task: Any, tasks: QuerySet[Any], now: datetime, run_time: float | None, what_if: WhatIf
) -> list[Rule | None]:
    using = tasks.db
    ready = tasks.filter(status=Status.READY).filter(due(), unexpired())
    rules: list[Rule | None] = []
    if task.not_before == AFTER_PARENTS:
        rules.append(Rule("parents", task.rn, None, 0, 0, None, "waits for its parents"))
    elif task.not_before is not None and task.not_before > now:
        wait = (task.not_before - now).total_seconds()
        rules.append(Rule("not_before", task.rn, None, 0, 0, wait, f"not before {task.not_before}"))
    rules.append(_queue_rule(task, tasks, ready, now, run_time, what_if))
    for element in task.keys or []:
        kind, name = element[:2], element[2:]
        if kind == "C:":
            size = what_if.limits.get(name) or (
                Limit.objects.using(using)
                .filter(name=name)
                .values_list("max_running", flat=True)
                .first()
            )
            mine = db.json_list_contains(tasks.model, "keys", element, using)
            rules.append(
                _slots(
                    "limit",
                    name,
                    size,
                    tasks.filter(mine, status=Status.RUNNING),
                    ahead_of(ready.filter(mine), task),
                    tasks,
                    now,
                    run_time,
                )
            )
        elif kind == "L:":
            holders = Q()
            for prefix in ("L:", "S:"):
                holders |= db.json_list_contains(tasks.model, "keys", prefix + name, using)
            mine = db.json_list_contains(tasks.model, "keys", element, using)
            rules.append(
                _slots(
                    "lock",
                    name,
                    1,
                    tasks.filter(holders, status=Status.RUNNING),
                    ahead_of(ready.filter(mine), task),
                    tasks,
                    now,
                    run_time,
                )
            )
        elif kind == "O:":
            rules.append(
                _slots(
                    "order key",
                    name,
                    1,
                    tasks.filter(order_key=name, status=Status.RUNNING),
                    tasks.filter(order_key=name, status=Status.READY).filter(
                        Q(order_seq__lt=task.order_seq or task.pk)
                        | Q(order_seq__isnull=True, pk__lt=task.pk)
                    ),
                    tasks,
                    now,
                    run_time,
                )
            )
        elif kind == "R:":
            rules.append(_rate_rule(task, tasks, ready, element, now))
    return rules


def _slots(
    kind: str,
    name: str,
    capacity: int | None,
    running: QuerySet[Any],
    ahead: QuerySet[Any],
    tasks: QuerySet[Any],
    now: datetime,
    run_time: float | None,
) -> Rule:
    in_use = running.count()
    before = _count(ahead)
    label = f"{kind} {name} {in_use}/{capacity if capacity is not None else '?'}"
    if capacity is None:
        return Rule(kind, name, None, in_use, before, None, f"{kind} {name} is not configured")
    if in_use < capacity and before < capacity - in_use:
        return Rule(kind, name, capacity, in_use, before, 0.0, f"{label}: a place is free")
    if run_time is None:
        return Rule(
            kind,
            name,
            capacity,
            in_use,
            before,
            None,
            f"{label}, {before} ahead: no run time measured on this queue yet",
        )
    wait = slot_wait(capacity, _remaining(tasks, running, now, run_time), before, run_time)
    return Rule(
        kind,
        name,
        capacity,
        in_use,
        before,
        wait,
        f"{label}, {before} ahead: {_in_words(wait)}",
    )


def _queue_rule(
    task: Any,
    tasks: QuerySet[Any],
    ready: QuerySet[Any],
    now: datetime,
    run_time: float | None,
    what_if: WhatIf,
) -> Rule | None:
    queue = task.queue
    setting = QueueSetting.objects.using(tasks.db).filter(queue=queue).first()
    if setting is not None and setting.paused:
        return Rule("queue", queue, None, 0, 0, None, f"queue {queue} is paused")
    workers = (
        Worker.objects.using(tasks.db)
        .in_state(Liveness.ALIVE)
        .serving(queue)
        .values_list("pk", "capacity")
    )
    slots = what_if.workers or sum(capacity for _, capacity in workers)
    if not slots:
        return Rule("workers", queue, 0, 0, 0, None, f"no live worker serves queue {queue}")
    names = [f"worker-{pk}" for pk, _ in workers]
    # The workers' slots are shared by every queue they serve.
    in_slots = tasks.filter(status=Status.RUNNING, owner__in=names)
    ahead = ahead_of(ready.filter(queue=queue), task)
    rule = _slots("workers", queue, slots, in_slots, ahead, tasks, now, run_time)
    max_running = what_if.max_running or (setting.max_running if setting else None)
    if max_running is not None:
        limited = _slots(
            "queue",
            queue,
            max_running,
            tasks.filter(queue=queue, status=Status.RUNNING),
            ahead,
            tasks,
            now,
            run_time,
        )
        if limited.wait is None or (rule.wait is not None and limited.wait > rule.wait):
            return limited
    return rule


def _rate_rule(
    task: Any, tasks: QuerySet[Any], ready: QuerySet[Any], element: str, now: datetime
) -> Rule:
    name = element[2:]
    rate = Rate.objects.using(tasks.db).filter(name=name).first()
    if rate is None:
        return Rule("rate", name, None, 0, 0, None, f"rate {name} is not configured")
    row = Key.objects.using(tasks.db).filter(name=element).first()
    epoch = now.timestamp()
    starts = [s - epoch for s in (row.starts if row else []) if s > epoch - rate.seconds]
    mine = db.json_list_contains(tasks.model, "keys", element, tasks.db)
    before = _count(ahead_of(ready.filter(mine), task))
    wait = rate_wait(rate.count, rate.seconds, starts, before)
    label = f"rate {name} {len(starts)}/{rate.count} per {short(rate.seconds)}"
    return Rule(
        "rate",
        name,
        rate.count,
        len(starts),
        before,
        wait,
        f"{label}, {before} ahead: {_in_words(wait)}",
    )


def retry_after(using: str, queue: str | None) -> int:
    """Seconds until a ready task of `queue` is likely to start (and free a place under a
    cap on ready tasks): at least 1; 1 when unknown."""
    if queue is None:
        return 1
    tasks = _task_model()._default_manager.using(using)
    measured = run_times(tasks, queue)
    if not measured:
        return 1
    run_time = statistics.fmean(measured)
    slots = sum(
        Worker.objects.using(using)
        .in_state(Liveness.ALIVE)
        .serving(queue)
        .values_list("capacity", flat=True)
    )
    if not slots:
        return retry_seconds(run_time)
    now = db.read_clock(using)
    running = tasks.filter(queue=queue, status=Status.RUNNING)
    return retry_seconds(slot_wait(slots, _remaining(tasks, running, now, run_time), 0, run_time))


def retry_seconds(seconds: float | None) -> int:
    """A Retry-After in whole seconds: at least 1."""
    return 1 if seconds is None or seconds != seconds else max(1, math.ceil(seconds))


def _task_model() -> Any:
    from django.apps import apps

    return apps.get_model("scylla_django", "Task")
