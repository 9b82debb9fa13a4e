"""The monitor: runs the maintenance services, each at its own interval, and retries through
database outages.

See docs/howto/monitor.md.

`Monitor.run()` loops until told to stop; `manage.py scylla_monitor` is a thin wrapper around it.
Any number of monitors may run at once, on one host or many: `Task.objects.reset_expired()` locks
the expired rows it handles (SKIP LOCKED), so each expiry is handled by exactly one of them, and
`Task.objects.purge()` deletes only rows that are still terminal, so concurrent purges cannot
delete anything twice or anything they should not. Nothing here needs to coordinate.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import Error as DatabaseError
from django.db import close_old_connections, connections

from .. import db
from ..conf import scylla_settings
from ..durations import short
from ..models import Monitor as MonitorRecord
from ..retries import exponential_delay
from ..text import DurationError, plural, positive_duration
from .aging import PriorityAging
from .callbacks import BatchCallbacks
from .deliveries import Deliveries
from .expiry import ExpiringTasks
from .followups import FollowUps
from .leases import ExpiredLeases
from .limits import LimitSettings
from .peers import SettingsNames
from .purge import FinishedTasks, OldEvents, ProcessRecords
from .rollups import QueueRollups
from .schedules import ScheduleTicks
from .service import Service
from .triggers import TriggerFirings

logger = logging.getLogger("scylla_django")


@dataclass(frozen=True)
class MonitorPass:
    """What one monitor pass did: `reset` expired leases were dealt with, `purged` tasks deleted.

    `reset` counts tasks made ready again and tasks aborted for `MAX_LEASES` alike, as
    `Task.objects.reset_expired()` does. A service that did not run in the pass counts 0.
    """

    reset: int
    purged: int
    released: int = 0
    """Follow-up tasks released (every parent completed)."""
    cancelled: int = 0
    """Follow-up tasks cancelled because a parent failed."""
    callbacks_released: int = 0
    """Batch callbacks released (their condition holds)."""
    callbacks_cancelled: int = 0
    """Batch callbacks cancelled (their condition can no longer hold)."""
    ticks: int = 0
    """Schedule ticks submitted."""
    settings_applied: int = 0
    """Limits and rates set to a new value of the settings."""
    workers_purged: int = 0
    rolled_up: int = 0
    """Queue rollup rows written (minutes and hours rolled up from History)."""
    rollups_purged: int = 0
    expired: int = 0
    """Ready tasks cancelled because their `expires_at` came before they started."""
    notifications: int = 0
    """Delivery tasks of completion notifications submitted."""
    task_events: int = 0
    """Task events written from History for the triggers that listen to them."""
    fired: int = 0
    """Schedules fired by their trigger."""
    delayed_released: int = 0
    """Delayed trigger firings released to their run constraints (their delay over)."""
    events_purged: int = 0
    aged: int = 0
    """Ready tasks whose priority rose by one (their queue's `aging`)."""


class Monitor:
    """Runs the maintenance services, once or each every its interval.

    The services, in the order a pass runs them: `leases` (reset expired leases), `followups`
    (release follow-ups), `expiry` (cancel ready tasks past their `expires_at`), `callbacks`
    (release or cancel batch callbacks), `deliveries` (submit the deliveries of completion
    notifications), `schedules` (sync the settings' schedules, submit due ticks, release the
    firings that waited for their run constraints), `limits` (set the limits and rates whose
    settings changed), `triggers` (write task events, fire the
    schedules whose trigger is met), `tasks` (purge old terminal tasks), `processes` (purge
    the records of workers and monitors long gone), `rollups` (roll up History for the
    dashboard's charts, every minute) and `events` (purge consumed events). Each has its own
    `interval` (the monitor's when None) and `wait_for_run()`, which tests wait on instead of
    sleeping.

    - `interval`: seconds from the start of one pass to the start of the next, for the services
      without an interval of their own.
    - `retention`: terminal tasks not updated for this long are purged, and queue rollups
      older than this. `None` means the `SCYLLA["RETENTION"]` setting, read again at every
      pass.
    - `using`: the database alias.
    - `reset_chunk_size`, `purge_chunk_size`: rows per transaction; `None` means the
      `RESET_CHUNK_SIZE` and `PURGE_CHUNK_SIZE` settings.
    - `clock`: the schedules' clock (the database's when None; tests pass a fake one).

    Any number of monitors may run at once, against the same database: the model methods they
    call are safe under concurrency (each expired lease is reset exactly once, and only terminal
    tasks are ever deleted), so no leader election or locking is needed here.

    `run()` survives database outages, and is the one place that retries: a pass that fails
    with a database error is logged, the broken connection is closed, and the pass is retried
    after an exponential backoff (`backoff_initial` doubling up to `backoff_max` seconds), which
    a successful pass resets.
    """

    backoff_initial: float = 1.0
    # A short cap: the monitor resumes within about a second of the database coming back (a
    # refused connection costs next to nothing), so expired leases are not left waiting.
    backoff_max: float = 1.0

    def __init__(
        self,
        interval: float = 5.0,
        retention: timedelta | None = None,
        using: str = "default",
        reset_chunk_size: int | None = None,
        purge_chunk_size: int | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        try:
            seconds = positive_duration(interval).total_seconds()
        except DurationError:
            raise ValueError(
                f"interval must be a positive number of seconds, not {interval!r}"
            ) from None
        try:
            retention = None if retention is None else positive_duration(retention)
        except DurationError:
            raise ValueError(f"retention must be a positive timedelta, not {retention!r}") from None
        for name, size in (
            ("reset_chunk_size", reset_chunk_size),
            ("purge_chunk_size", purge_chunk_size),
        ):
            if size is not None and (
                isinstance(size, bool) or not isinstance(size, int) or size < 1
            ):
                raise ValueError(f"{name} must be a positive integer, not {size!r}")
        self.interval = seconds
        self.retention = retention
        self.using = using
        self.leases = ExpiredLeases(chunk_size=reset_chunk_size)
        self.followups = FollowUps()
        self.expiry = ExpiringTasks(chunk_size=reset_chunk_size)
        self.aging = PriorityAging()
        self.callbacks = BatchCallbacks()
        self.deliveries = Deliveries()
        self.settings_names = SettingsNames()
        """The names this monitor's settings define, published on its registry row."""
        self.schedules = ScheduleTicks(clock=clock, names=self.settings_names)
        self.limits = LimitSettings(names=self.settings_names)
        self.triggers = TriggerFirings(clock=clock)
        self.tasks = FinishedTasks(retention=retention, chunk_size=purge_chunk_size)
        self.processes = ProcessRecords(retention=retention)
        self.rollups = QueueRollups(retention=retention)
        self.events = OldEvents(retention=retention)
        self.services: list[Service] = [
            self.leases,
            self.followups,
            self.expiry,
            self.aging,
            self.callbacks,
            self.deliveries,
            self.schedules,
            self.limits,
            self.triggers,
            self.tasks,
            self.processes,
            self.rollups,
            self.events,
        ]
        """The services, in the order a pass runs them."""
        self.last_pass: MonitorPass | None = None
        """The result of the latest successful pass (None before the first)."""
        self.record: MonitorRecord | None = None
        """This monitor's row in the registry, made as the first pass begins."""

    def interval_of(self, service: Service) -> float:
        """Seconds between two runs of `service`: its own interval, else the monitor's (no
        longer than the service's `at_most`)."""
        if service.interval is not None:
            return service.interval
        return self.interval if service.at_most is None else min(self.interval, service.at_most)

    # -- one pass -------------------------------------------------------------------------------

    def run_once(self, services: Sequence[Service] | None = None) -> MonitorPass:
        """One pass: run `services` (all of them when None) in order, then record the pass.

        Database errors propagate; `run()` is the one that retries.
        """
        if self.record is None:
            # Before the services: the other monitors see this one, and what its settings
            # define, from its first sync of settings on.
            self.record = MonitorRecord.objects.db_manager(self.using).register(
                timedelta(seconds=self.interval), hostname=socket.gethostname(), pid=os.getpid()
            )
            self.settings_names.attach(self.record)
        counts: dict[str, int] = {}
        for service in self.services if services is None else services:
            counts.update(service.run(self.using))
        reset, purged = counts.pop("reset", 0), counts.pop("purged", None)
        # A pass without the purge (the expired leases run more often) keeps the last count.
        self.record.touch(reset=reset, purged=purged)
        self.last_pass = MonitorPass(reset=reset, purged=purged or 0, **counts)
        return self.last_pass

    def stop_record(self) -> None:
        """Record in the registry that this monitor has stopped (if it ever registered)."""
        if self.record is not None:
            try:
                self.record.stop()
            except DatabaseError as exc:
                logger.warning("%s could not record its stop: %s", self.record.name, exc)

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, once: bool = False) -> None:
        """Run each service every its interval until `stop` is set (forever if it is None).

        A pass runs the services that are due (all of them at first). A stop is noticed at
        once, between passes or during a backoff; a pass under way is finished first. A
        database error in a pass is logged as a warning and the pass retried after a backoff
        (`backoff_initial` doubling up to `backoff_max`, 1 s by default), on a fresh connection.

        With `once=True`, a single pass of every service is made and a database error is
        raised, not retried, so that a one-shot run fails loudly.
        """
        if once:
            self._refresh_connections()
            try:
                self.run_once()
            finally:
                self.stop_record()
            return
        stop = stop if stop is not None else threading.Event()
        logger.info(
            "monitor started: a pass every %s, purging terminal tasks older than %s",
            short(timedelta(seconds=self.interval)),
            f"{short(scylla_settings.RETENTION)} (the RETENTION setting)"
            if self.retention is None
            else short(self.retention),
        )
        retry = db.DatabaseRetry(
            self.using,
            lambda failures: exponential_delay(
                failures, initial=self.backoff_initial, cap=self.backoff_max
            ),
        )
        due_at = {id(service): 0.0 for service in self.services}
        try:
            while not stop.is_set():
                started = time.monotonic()
                due = [s for s in self.services if due_at.get(id(s), 0.0) <= started]
                try:
                    self._refresh_connections()
                    self.run_once(due)
                except DatabaseError as exc:
                    backoff = retry.failed()  # the connection is dropped too
                    logger.warning(
                        "monitor pass failed (%s: %s); retrying in %s%s",
                        type(exc).__name__,
                        " ".join(str(exc).split()) or "no message",
                        short(timedelta(seconds=backoff)),
                        db.migrate_hint(exc),
                    )
                    if self._wait(stop, backoff):
                        break
                    continue
                if failures := retry.succeeded():
                    logger.info("database back after %s", plural(failures, "failed attempt"))
                for service in due:
                    due_at[id(service)] = started + self.interval_of(service)
                following = min(due_at.get(id(s), 0.0) for s in self.services)
                if self._wait(stop, max(0.0, following - time.monotonic())):
                    break
        finally:
            self.stop_record()
            db.discard_connection(self.using)
            logger.info("monitor stopped")

    def _wait(self, stop: threading.Event, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True if `stop` was set (at once, not after the timeout)."""
        return stop.wait(timeout)

    # -- connections ----------------------------------------------------------------------------

    def _in_transaction(self) -> bool:
        """Whether the caller holds our connection inside `atomic()` (closing it would break it).

        The monitor never runs so in production; a test case calling it does.
        """
        return connections[self.using].in_atomic_block

    def _refresh_connections(self) -> None:
        """Replace connections that are broken or past CONN_MAX_AGE, as Django does per request."""
        if not self._in_transaction():
            close_old_connections()
