"""The dashboard's workers: the alive and silent ones from the Worker registry, with the dead and
stopped ones that still hold running tasks (one query over the running tasks, a handful at any
time); and the live workers' names and queues, which the list filters suggest."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q

from ...conf import scylla_settings
from ...durations import ago
from ...enums import Liveness, Status
from ...models import Task, Worker
from ...validation import worker_id, worker_name_for

WORKER_LIMIT = 100
# A worker touches `last_seen` every quarter of its lease length; give it a few beats of slack.
WORKER_SILENCE = timedelta(minutes=2)
HELD_LIMIT = 5


def running_counts(owners: Iterable[str]) -> dict[str, int]:
    """How many tasks each of `owners` (worker names) is running: one GROUP BY."""
    names = sorted(set(owners))
    if not names:
        return {}
    rows = (
        Task.objects.filter(status=Status.RUNNING, owner__in=names)
        .order_by()
        .values_list("owner")
        .annotate(n=Count("*"))
        .values_list("owner", "n")
    )
    return {owner: n for owner, n in rows if owner is not None}


@dataclass(frozen=True)
class WorkerRow:
    """A worker, its liveness on the database clock, and the tasks it holds."""

    id: int
    name: str
    hostname: str
    pid: int | None
    queues: list[str]
    capacity: int
    running: int
    started: datetime
    last_seen: datetime
    state: str = Liveness.ALIVE.value
    held: tuple[tuple[int, str], ...] = ()

    @property
    def seen(self) -> str:
        """When it was last seen, in words."""
        return ago(self.last_seen)

    @property
    def load(self) -> float:
        """running / capacity, for a progress bar."""
        return min(1.0, self.running / self.capacity) if self.capacity else 0.0

    @property
    def gone(self) -> bool:
        """Silent, dead or stopped while holding tasks: their leases may be reset now."""
        return self.state != Liveness.ALIVE and self.running > 0


def worker_silence() -> timedelta:
    """How long a worker may stay unseen and still be suggested in the list filters."""
    return max(WORKER_SILENCE, 3 * scylla_settings.LEASE_LENGTH)


@dataclass(frozen=True)
class Workers:
    """The workers worth a look: alive or silent, or holding running tasks whatever their
    state; the first `WORKER_LIMIT` by id, and how many workers are in each state."""

    count: int
    rows: list[WorkerRow]
    states: dict[str, int]

    @property
    def capacity(self) -> int:
        return sum(row.capacity for row in self.rows if row.state == Liveness.ALIVE)

    @property
    def running(self) -> int:
        return sum(row.running for row in self.rows)

    @property
    def state_counts(self) -> list[tuple[str, int]]:
        """(state, count) in the order of `Liveness`."""
        return [(state, self.states.get(state, 0)) for state in Liveness.values]

    @property
    def gone(self) -> list[WorkerRow]:
        """The workers that are not alive yet hold tasks."""
        return [row for row in self.rows if row.gone]


def held_tasks(owners: Iterable[str], limit: int) -> dict[str, list[tuple[int, str]]]:
    """The running tasks of `owners`, newest first: (id, rn) per owner, `limit` in all."""
    names = sorted(set(owners))
    held: dict[str, list[tuple[int, str]]] = {}
    if not names:
        return held
    rows = (
        Task.objects.filter(status=Status.RUNNING, owner__in=names)
        .order_by("-id")
        .values_list("pk", "rn", "owner")[:limit]
    )
    for pk, rn, owner in rows:
        if owner is not None:
            held.setdefault(owner, []).append((pk, rn))
    return held


def worker_board(limit: int = WORKER_LIMIT) -> Workers:
    """The workers by id with their states and running tasks: four small queries.

    Dead and stopped workers are listed only while they hold running tasks (a worker killed
    mid-task, whose leases await the monitor or a "Reset lease now").
    """
    busy = (
        Task.objects.filter(status=Status.RUNNING)
        .order_by()
        .values_list("owner")
        .annotate(n=Count("*"))
        .values_list("owner", "n")
    )
    running = {owner: n for owner, n in busy if owner is not None}
    holders = [pk for pk in (worker_id(owner) for owner in running) if pk is not None]
    shown = Worker.objects.filter(
        Worker.objects.state_q(Liveness.ALIVE)
        | Worker.objects.state_q(Liveness.SILENT)
        | Q(pk__in=holders)
    )
    workers = list(shown.with_state().order_by("id")[:limit])
    held = held_tasks((w.name for w in workers if running.get(w.name)), limit * HELD_LIMIT)
    rows = [
        WorkerRow(
            id=w.pk,
            name=w.name,
            hostname=w.hostname,
            pid=w.pid,
            queues=[str(q) for q in w.queues] if isinstance(w.queues, list) else [],
            capacity=w.capacity,
            running=running.get(w.name, 0),
            started=w.started,
            last_seen=w.last_seen,
            state=str(getattr(w, "liveness", Liveness.ALIVE.value)),
            held=tuple(held.get(w.name, [])[:HELD_LIMIT]),
        )
        for w in workers
    ]
    return Workers(
        len(rows) if len(rows) < limit else shown.count(),
        rows,
        Worker.objects.count_by_state(),
    )


def known_workers(limit: int = 200) -> list[str]:
    """The names of the live workers, newest first."""
    alive = Worker.objects.alive(worker_silence()).order_by("-id")
    return [worker_name_for(pk) for pk in alive.values_list("pk", flat=True)[:limit]]


def known_queues(limit: int = 200) -> list[str]:
    """Queue names served by live workers: cheap suggestions, never a scan of the tasks."""
    queues: set[str] = set()
    for names in Worker.objects.alive(worker_silence()).values_list("queues", flat=True)[:limit]:
        if isinstance(names, list):
            queues.update(str(name) for name in names)
    return sorted(queues)
