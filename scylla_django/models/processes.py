"""Registered processes: workers and monitors, their names, and their liveness (alive,
silent, dead, stopped) judged on the database clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self, TypeVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Case, Max, Q, Value, When

from .. import db, validation
from ..conf import heartbeat_interval_for, scylla_settings
from ..db import Now
from ..enums import (
    Liveness,
    Status,
)
from ..exceptions import (
    WorkerNotFound,
)
from ..validation import (
    validate_limit,
    validate_queue,
    validate_queues,
    validate_timeout,
    validate_timeouts,
)

WORKER_PREFIX = validation.WORKER_PREFIX


def worker_name(worker: Worker | str) -> str:
    """The name a task's `owner` holds for `worker` (a Worker or its name)."""
    return worker.name if isinstance(worker, Worker) else worker


def required_worker_id(name: str) -> int:
    """The primary key in the worker name `worker-<id>` (`validation.worker_id`, the one rule),
    or WorkerNotFound if `name` is not a worker name."""
    pk = validation.worker_id(name)
    if pk is None:
        raise WorkerNotFound(f"{name!r} is not a worker name.")
    return pk


def lease_terms(
    worker_id: int,
    name: str,
    queues: Sequence[str],
    limit: int,
    lease_length: timedelta | float | None,
    timeouts: Mapping[str, timedelta | float | str | None] | None,
    timeout_grace: timedelta | float | None,
    reservation: timedelta | float | None,
) -> db.LeaseTerms:
    """The terms of a lease for the worker `name` (its pk `worker_id`), validated (a
    ValidationError names what is wrong) and defaulted from the settings (`LEASE_LENGTH`,
    `TIMEOUT_GRACE`): what `TaskQuerySet.lease` and `finish_and_lease` hand a driver."""
    lease_length = scylla_settings.LEASE_LENGTH if lease_length is None else lease_length
    grace = scylla_settings.TIMEOUT_GRACE if timeout_grace is None else timeout_grace
    return db.LeaseTerms(
        worker_id,
        name,
        validate_queues(queues),
        validate_limit(limit),
        validate_timeout(lease_length),
        validate_timeouts(timeouts),
        validate_timeout(grace),
        None if reservation is None else validate_timeout(reservation),
    )


_Registered = TypeVar("_Registered", bound=models.Model)


#: The most tasks a worker may register to hold at once: an `async def` handler's slot costs no
#: thread, so a worker may hold tens of thousands.
MAX_CAPACITY = 1_000_000


class LivenessQuerySet(models.QuerySet[_Registered]):
    """Registered processes (workers, monitors) by liveness, on the database clock.

    A process is silent after two of its intervals unseen and dead after its lease length (a
    worker) or three intervals (a monitor); see `Liveness`.
    """

    # Workers registered before the liveness columns existed are judged by `last_seen`.
    worker_fallback: ClassVar[bool] = False

    def state_q(self, state: Liveness) -> Q:
        """The condition for the processes in `state`."""
        return _liveness_q(state, worker_fallback=self.worker_fallback)

    def in_state(self, *states: Liveness | str) -> Self:
        """The processes in any of `states` (`alive`, `silent`, `dead`, `stopped`)."""
        condition = Q(pk__in=[])
        for state in states:
            condition |= self.state_q(Liveness(state))
        return self.filter(condition)

    def with_state(self) -> Self:
        """Annotate each process with `liveness`: alive, silent, dead or stopped."""
        return self.annotate(liveness=_liveness_case(worker_fallback=self.worker_fallback))

    def count_by_state(self) -> dict[str, int]:
        """How many processes are in each state (every state present, zeros included)."""
        return _count_by_state(self, worker_fallback=self.worker_fallback)


class WorkerQuerySet(LivenessQuerySet["Worker"]):
    """Worker processes: registration, lookup by name, liveness."""

    worker_fallback = True

    def register(
        self,
        queues: Sequence[str],
        capacity: int = 1,
        *,
        hostname: str = "",
        pid: int | None = None,
        user: Any = None,
        heartbeat_interval: timedelta | float | None = None,
        lease_length: timedelta | float | None = None,
        max_load: float | None = None,
    ) -> Worker:
        """Register a worker process; its name `worker-<id>` comes from the database sequence.

        `user` is who registered it over HTTP: only they (or staff) may act as it there.
        `lease_length` (default `SCYLLA['LEASE_LENGTH']`) and `heartbeat_interval` (default a
        quarter of it, as for every worker) say when the worker counts as silent and dead if
        it is not seen again.
        """
        queues = validate_queues(queues)
        if (
            isinstance(capacity, bool)
            or not isinstance(capacity, int)
            or not 1 <= capacity <= MAX_CAPACITY
        ):
            message = f"Capacity must be 1..{MAX_CAPACITY}."
            raise ValidationError({"capacity": ValidationError(message, code="invalid")})
        lease, interval = _liveness_intervals(lease_length, heartbeat_interval)
        worker = self.create(
            queues=queues,
            capacity=capacity,
            max_load=max_load,
            hostname=hostname[:255],
            pid=pid,
            user=user,
            heartbeat_interval=interval,
            lease_length=lease,
            silent_at=db.now_plus(2 * interval),
            dead_at=db.now_plus(lease),
        )
        worker.refresh_from_db(fields=["silent_at", "dead_at"])
        return worker

    def get_by_name(self, name: str) -> Worker:
        """The worker called `name` (`worker-<id>`), or WorkerNotFound."""
        try:
            return self.get(pk=required_worker_id(name))
        except self.model.DoesNotExist:
            raise WorkerNotFound(f"No worker is called {name!r}.") from None

    def alive(self, within: timedelta) -> WorkerQuerySet:
        """Workers not stopped that were seen in the last `within`."""
        return self.filter(stopped__isnull=True, last_seen__gte=db.now_plus(-within))

    def serving(self, queue: str) -> WorkerQuerySet:
        """Workers whose `queues` include `queue` (exact name)."""
        return self.filter(
            db.json_list_contains(self.model, "queues", validate_queue(queue), self.db)
        )

    def purge(self, older_than: timedelta | None = None, *, chunk_size: int = 1000) -> int:
        """Delete workers not seen for `older_than` (default `SCYLLA['RETENTION']`).

        A worker that still owns a running task is kept (its name is the task's `owner` until
        the lease is reset). Returns how many were deleted.
        """
        age = validate_timeout(scylla_settings.RETENTION if older_than is None else older_than)
        gone = self.filter(last_seen__lt=db.now_plus(-age)).order_by("pk")
        # The Task model, found by name: it stands above this module, which it imports.
        tasks = self.model._meta.apps.get_model(self.model._meta.app_label, "Task")
        total, after = 0, 0
        while True:
            ids = list(gone.filter(pk__gt=after).values_list("pk", flat=True)[:chunk_size])
            if not ids:
                return total
            after = ids[-1]
            with db.write_atomic(self.db):
                busy = set(
                    tasks.objects.using(self.db)
                    .filter(
                        status=Status.RUNNING,
                        owner__in=[validation.worker_name_for(pk) for pk in ids],
                    )
                    .values_list("owner", flat=True)
                )
                idle = [pk for pk in ids if validation.worker_name_for(pk) not in busy]
                total += self.model.objects.using(self.db).filter(pk__in=idle).delete()[0]


class RegisteredProcess(models.Model):
    """What workers and monitors have in common: a `<prefix><id>` name, where they run, when
    they were last seen, and when they turn silent and dead unless seen again.

    Each touch writes `silent_at` and `dead_at` from the database clock, so telling a state is a
    comparison with now() on every database (no per-row interval arithmetic).
    """

    prefix: ClassVar[str]

    id = models.BigAutoField(primary_key=True)
    hostname = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    started = models.DateTimeField(db_default=Now(), editable=False)
    last_seen = models.DateTimeField(db_default=Now())
    stopped = models.DateTimeField(null=True, blank=True)
    silent_at = models.DateTimeField(null=True, blank=True)
    dead_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        """The process's name: its prefix and its key (`worker-7`, `monitor-3`)."""
        return f"{self.prefix}{self.pk}"

    def stop(self) -> None:
        """Record that the process has stopped."""
        type(self)._default_manager.using(self._state.db).filter(
            pk=self.pk, stopped__isnull=True
        ).update(stopped=Now())
        self.refresh_from_db(fields=["stopped"])


class Worker(RegisteredProcess):
    """A worker process. Its name is `worker-<id>`; a restarted process registers anew."""

    prefix = WORKER_PREFIX

    queues = models.JSONField(default=list)
    capacity = models.PositiveIntegerField(default=1)
    # Who registered the worker over HTTP; only they may act as it (null for local workers).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # The intervals the worker announced: silent after two heartbeat intervals unseen, dead
    # after its lease length.
    heartbeat_interval = models.DurationField(null=True, blank=True)
    lease_length = models.DurationField(null=True, blank=True)
    # `--max-load`: the host load over which the worker leases nothing (null: no limit), and
    # the load that keeps it from leasing now (null while it leases): "why is it waiting".
    max_load = models.FloatField(null=True, blank=True)
    overload = models.FloatField(null=True, blank=True)
    # The host's load average (one minute) as the worker last read it, with its liveness.
    load = models.FloatField(null=True, blank=True)

    objects: ClassVar[WorkerQuerySet] = WorkerQuerySet.as_manager()  # type: ignore[assignment]

    def touch(self, *, load: float | None = None) -> None:
        """Record that the worker is alive (`last_seen = now`), pushing back silent and dead;
        with `load`, the host's load average too (what a schedule's `max_load` reads)."""
        lease, interval = _liveness_intervals(self.lease_length, self.heartbeat_interval)
        values: dict[str, Any] = {"load": load} if load is not None else {}
        Worker.objects.using(self._state.db).filter(pk=self.pk).update(
            last_seen=Now(),
            silent_at=db.now_plus(2 * interval),
            dead_at=db.now_plus(lease),
            **values,
        )

    def record_overload(self, load: float | None) -> None:
        """Record that the host's load `load` keeps this worker from leasing (over its
        `max_load`), or with None that it leases again."""
        Worker.objects.using(self._state.db).filter(pk=self.pk).update(overload=load)
        self.overload = load

    def current_state(self) -> str:
        """This worker's liveness now (one query): alive, silent, dead or stopped."""
        found = (
            Worker.objects.using(self._state.db)
            .filter(pk=self.pk)
            .annotate(liveness=_liveness_case(worker_fallback=True))
            .values_list("liveness", flat=True)
            .first()
        )
        return str(found) if found is not None else Liveness.DEAD.value


def _liveness_intervals(
    lease_length: timedelta | float | None, heartbeat_interval: timedelta | float | None
) -> tuple[timedelta, timedelta]:
    """A worker's lease length and heartbeat interval, defaulted and validated."""
    lease = validate_timeout(scylla_settings.LEASE_LENGTH if lease_length is None else lease_length)
    if heartbeat_interval is None:
        return lease, heartbeat_interval_for(lease)
    return lease, validate_timeout(heartbeat_interval)


def _liveness_q(state: Liveness, *, worker_fallback: bool) -> Q:
    """The condition for a registered process (worker or monitor) to be in `state`.

    Rows written before the liveness columns existed have no `silent_at`/`dead_at`; for
    workers they are judged by `last_seen` against the `LEASE_LENGTH` setting instead.
    """
    now = Now()
    dead = Q(dead_at__lte=now)
    silent = Q(silent_at__lte=now)
    if worker_fallback:
        lease = scylla_settings.LEASE_LENGTH
        dead |= Q(dead_at__isnull=True, last_seen__lte=db.now_plus(-lease))
        interval = heartbeat_interval_for(lease)
        silent |= Q(silent_at__isnull=True, last_seen__lte=db.now_plus(-2 * interval))
    running = Q(stopped__isnull=True)
    if state == Liveness.STOPPED:
        return ~running
    if state == Liveness.DEAD:
        return running & dead
    if state == Liveness.SILENT:
        return running & ~dead & silent
    return running & ~dead & ~silent


def _liveness_case(*, worker_fallback: bool) -> Case:
    """`state` as an expression: the first of stopped, dead, silent that holds, else alive."""
    return Case(
        *(
            When(_liveness_q(state, worker_fallback=worker_fallback), then=Value(state.value))
            for state in (Liveness.STOPPED, Liveness.DEAD, Liveness.SILENT)
        ),
        default=Value(Liveness.ALIVE.value),
        output_field=models.CharField(),
    )


def _count_by_state(queryset: models.QuerySet[Any], *, worker_fallback: bool) -> dict[str, int]:
    counts = dict.fromkeys(Liveness.values, 0)
    rows = (
        queryset.order_by()
        .annotate(liveness=_liveness_case(worker_fallback=worker_fallback))
        .values_list("liveness")
        .annotate(n=models.Count("*"))
        .values_list("liveness", "n")
    )
    for state, count in rows:
        counts[str(state)] = int(count)
    return counts


MONITOR_PREFIX = "monitor-"


class MonitorQuerySet(LivenessQuerySet["Monitor"]):
    """Registered monitor processes, and what the latest of their passes did."""

    def register(
        self, interval: timedelta | float, *, hostname: str = "", pid: int | None = None
    ) -> Monitor:
        """Register a monitor making a pass every `interval`; its name is `monitor-<id>`."""
        every = validate_timeout(interval)
        monitor = self.create(
            hostname=hostname[:255],
            pid=pid,
            interval=every,
            silent_at=db.now_plus(2 * every),
            dead_at=db.now_plus(3 * every),
        )
        monitor.refresh_from_db(fields=["silent_at", "dead_at"])
        return monitor

    def status(self) -> MonitorStatus:
        """When the last pass of any monitor ended, and whether none has run for three of its
        intervals (then expired leases are not being reset). On the database clock."""
        found = self.aggregate(
            last=Max("last_pass"),
            age=models.ExpressionWrapper(
                Now() - Max("last_pass"), output_field=models.DurationField()
            ),
        )
        # A monitor run once (`--once`, e.g. from cron) is stopped yet counts until its
        # `dead_at`: three intervals after its pass.
        running = self.filter(dead_at__gt=Now()).exists()
        age = found["age"]
        return MonitorStatus(
            last_pass=found["last"],
            last_pass_age=max(age, timedelta(0)) if age is not None else None,
            missing=not running,
        )

    def peers(self, me: Monitor | None = None) -> Peers:
        """The running monitors (alive or silent) other than `me`, with the names their
        settings define: one query, on the database clock."""
        rows = self.in_state(Liveness.ALIVE, Liveness.SILENT).values_list("pk", "configured")
        if me is not None:
            rows = rows.exclude(pk=me.pk)
        return Peers(
            me=None if me is None else me.pk,
            monitors=tuple(
                Peer(pk, configured if isinstance(configured, dict) else None)
                for pk, configured in rows.order_by("pk")
            ),
        )

    def purge(self, older_than: timedelta | None = None) -> int:
        """Delete monitors not seen for `older_than` (default `SCYLLA['RETENTION']`)."""
        age = validate_timeout(scylla_settings.RETENTION if older_than is None else older_than)
        return self.filter(last_seen__lt=db.now_plus(-age)).delete()[0]


@dataclass(frozen=True)
class Peer:
    """Another running monitor: its key, and the names its settings define by setting (None
    until it has said: then it is taken to define every name)."""

    pk: int
    configured: dict[str, Any] | None

    @property
    def name(self) -> str:
        return f"{MONITOR_PREFIX}{self.pk}"

    def defines(self, setting: str, name: str) -> bool:
        """Whether its `setting` ("SCHEDULES", "LIMITS", "RATES") defines `name`."""
        if self.configured is None or not isinstance(self.configured.get(setting), list):
            return True
        return name in self.configured[setting]


@dataclass(frozen=True)
class Peers:
    """The monitors running beside one (`me`, its key; None for code that runs outside a
    monitor), and the settings names each defines.

    Monitors with different settings run side by side during a rolling deploy. Two rules keep
    them from undoing each other's work: a name the settings of a monitor started later
    (a greater key) define is synced by that monitor alone (`newer_defining`), and a schedule
    that came from settings is not deleted while a running monitor's settings define it
    (`defining`). Code outside a monitor counts as the newest.
    """

    me: int | None
    monitors: tuple[Peer, ...]

    def defining(self, setting: str, name: str) -> Peer | None:
        """A running monitor whose `setting` defines `name`, if any."""
        return next((p for p in self.monitors if p.defines(setting, name)), None)

    def newer_defining(self, setting: str, name: str) -> Peer | None:
        """The newest monitor started after `me` whose `setting` defines `name`, if any."""
        if self.me is None:
            return None
        newer = [p for p in self.monitors if p.pk > self.me and p.defines(setting, name)]
        return newer[-1] if newer else None


@dataclass(frozen=True)
class MonitorStatus:
    """The monitors at a glance: the end of the latest pass, its age, and whether none runs."""

    last_pass: datetime | None
    last_pass_age: timedelta | None
    missing: bool


class Monitor(RegisteredProcess):
    """A monitor process (`scylla_monitor`): registered like a worker, touched at every pass.

    Kept apart from `Worker` so that nothing that lists, leases for or counts workers can
    mistake a monitor for one; the liveness rules are the same functions.
    """

    prefix = MONITOR_PREFIX

    interval = models.DurationField()
    last_pass = models.DateTimeField(null=True, blank=True)
    last_reset = models.PositiveIntegerField(default=0)
    last_purged = models.PositiveIntegerField(default=0)
    # The names this monitor's settings define, by setting: {"SCHEDULES": [...], "LIMITS":
    # [...], "RATES": [...]} (see `peers`); null, or a setting missing, until it has said.
    configured = models.JSONField(null=True, blank=True, editable=False)

    objects: ClassVar[MonitorQuerySet] = MonitorQuerySet.as_manager()  # type: ignore[assignment]

    def touch(self, *, reset: int | None = None, purged: int | None = None) -> None:
        """Record that the monitor is alive; with `reset`, that it finished a pass (with
        `purged`, one that purged)."""
        values: dict[str, Any] = {
            "last_seen": Now(),
            "silent_at": db.now_plus(2 * self.interval),
            "dead_at": db.now_plus(3 * self.interval),
        }
        if reset is not None:
            values.update(last_pass=Now(), last_reset=reset)
            if purged is not None:
                values["last_purged"] = purged
        Monitor.objects.using(self._state.db).filter(pk=self.pk).update(**values)

    def publish(self, configured: dict[str, list[str]]) -> None:
        """Say which names this monitor's settings define, by setting (`Peers` reads them)."""
        Monitor.objects.using(self._state.db).filter(pk=self.pk).update(configured=configured)
        self.configured = configured
