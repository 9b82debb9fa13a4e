"""The monitor: reset expired leases, then purge terminal tasks past their retention.

See the README, "The monitor and cleanup".

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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import Error as DatabaseError
from django.db import close_old_connections, connections

from . import followups, schedules
from .conf import scylla_settings
from .db import DatabaseRetry, discard_connection
from .models import Monitor as MonitorRecord
from .models import Task, Worker
from .retries import exponential_delay
from .text import DurationError, format_duration, plural, positive_duration

logger = logging.getLogger("scylla_django")


@dataclass(frozen=True)
class MonitorPass:
    """What one monitor pass did: `reset` expired leases were dealt with, `purged` tasks deleted.

    `reset` counts tasks made ready again and tasks aborted for `MAX_ATTEMPTS` alike, as
    `Task.objects.reset_expired()` does.
    """

    reset: int
    purged: int
    released: int = 0
    """Follow-up tasks released (every parent completed)."""
    cancelled: int = 0
    """Follow-up tasks cancelled because a parent failed."""
    ticks: int = 0
    """Schedule ticks submitted."""
    workers_purged: int = 0


class Monitor:
    """Resets expired leases and purges old terminal tasks, once or every `interval` seconds.

    - `interval`: seconds from the start of one pass to the start of the next.
    - `retention`: terminal tasks not updated for this long are purged. `None` means the
      `SCYLLA["RETENTION"]` setting, read again at every pass.
    - `using`: the database alias.
    - `reset_batch_size`, `purge_batch_size`: rows per transaction; `None` means the
      `RESET_BATCH_SIZE` and `PURGE_BATCH_SIZE` settings.

    Any number of monitors may run at once, against the same database: the model methods they
    call are safe under concurrency (each expired lease is reset exactly once, and only terminal
    tasks are ever deleted), so no leader election or locking is needed here.

    `run()` survives database outages: a pass that fails with a database error is logged, the
    broken connection is closed, and the pass is retried after an exponential backoff
    (`backoff_initial` doubling up to `backoff_max` seconds), which a successful pass resets.
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
        reset_batch_size: int | None = None,
        purge_batch_size: int | None = None,
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
            ("reset_batch_size", reset_batch_size),
            ("purge_batch_size", purge_batch_size),
        ):
            if size is not None and (
                isinstance(size, bool) or not isinstance(size, int) or size < 1
            ):
                raise ValueError(f"{name} must be a positive integer, not {size!r}")
        self.interval = seconds
        self.retention = retention
        self.using = using
        self.reset_batch_size = reset_batch_size
        self.purge_batch_size = purge_batch_size
        self.recurring = Recurring(using, clock)
        self.last_pass: MonitorPass | None = None
        """The result of the latest successful pass (None before the first)."""
        self.record: MonitorRecord | None = None
        """This monitor's row in the registry, made at the first pass."""

    # -- one pass -------------------------------------------------------------------------------

    def run_once(self) -> MonitorPass:
        """One pass: reset every expired lease, then purge terminal tasks past retention.

        Database errors propagate; `run()` is the one that retries.
        """
        retention = scylla_settings.RETENTION if self.retention is None else self.retention
        tasks = Task.objects.using(self.using)
        reset = tasks.reset_expired(batch_size=self.reset_batch_size)
        if reset:
            logger.info("reset %s", plural(reset, "expired lease"))
        else:
            logger.debug("no expired leases")
        followed = self.recurring.run_once()
        purged = tasks.purge(older_than=retention, batch_size=self.purge_batch_size)
        age = format_duration(retention)
        if purged:
            logger.info("purged %s older than %s", plural(purged, "task"), age)
        else:
            logger.debug("no terminal tasks older than %s to purge", age)
        workers = Worker.objects.using(self.using).purge(older_than=retention)
        workers += MonitorRecord.objects.using(self.using).purge(older_than=retention)
        if workers:
            logger.info("purged %s not seen for %s", plural(workers, "worker record"), age)
        if self.record is None:
            self.record = MonitorRecord.objects.db_manager(self.using).register(
                timedelta(seconds=self.interval), hostname=socket.gethostname(), pid=os.getpid()
            )
        self.record.touch(reset=reset, purged=purged)
        self.last_pass = MonitorPass(reset=reset, purged=purged, workers_purged=workers, **followed)
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
        """Run a pass every `interval` seconds until `stop` is set (forever if it is None).

        A stop is noticed at once, between passes or during a backoff; a pass under way is
        finished first. A database error in a pass is logged as a warning and the pass retried
        after a backoff (`backoff_initial` doubling up to `backoff_max`, 1 s by default), on
        a fresh connection.

        With `once=True`, a single pass is made and a database error is raised, not retried, so
        that a one-shot run fails loudly.
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
            format_duration(timedelta(seconds=self.interval)),
            f"{format_duration(scylla_settings.RETENTION)} (the RETENTION setting)"
            if self.retention is None
            else format_duration(self.retention),
        )
        retry = DatabaseRetry(
            self.using,
            lambda failures: exponential_delay(
                failures, initial=self.backoff_initial, cap=self.backoff_max
            ),
        )
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    self._refresh_connections()
                    self.run_once()
                except DatabaseError as exc:
                    backoff = retry.failed()  # the connection is dropped too
                    logger.warning(
                        "monitor pass failed (%s: %s); retrying in %s",
                        type(exc).__name__,
                        " ".join(str(exc).split()) or "no message",
                        format_duration(timedelta(seconds=backoff)),
                    )
                    if self._wait(stop, backoff):
                        break
                    continue
                if failures := retry.succeeded():
                    logger.info("database back after %s", plural(failures, "failed attempt"))
                if self._wait(stop, max(0.0, started + self.interval - time.monotonic())):
                    break
        finally:
            self.stop_record()
            discard_connection(self.using)
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


class Recurring:
    """The monitor's part in follow-ups and schedules, once per pass.

    Syncs `SCYLLA["SCHEDULES"]` into the Schedule table, releases (or cancels) follow-up tasks,
    and submits the task of every due schedule tick. `clock` is the schedules' clock (the
    database's when None; tests pass a fake one). Safe with any number of monitors.
    """

    def __init__(self, using: str = "default", clock: Callable[[], datetime] | None = None):
        self.using = using
        self.clock = clock

    def run_once(self) -> dict[str, int]:
        """One pass; returns the counts `released`, `cancelled` and `ticks`."""
        now = self.clock() if self.clock is not None else None
        schedules.sync_from_settings(schedules.configured(), self.using, now)
        followed = followups.release_followups(self.using)
        if followed.released or followed.cancelled:
            logger.info(
                "released %s, cancelled %s",
                plural(followed.released, "follow-up task"),
                plural(followed.cancelled, "follow-up task"),
            )
        ticks = [t for t in schedules.tick(self.using, now) if t.rn is not None]
        if ticks:
            logger.info("submitted %s", plural(len(ticks), "schedule tick"))
        return {"released": followed.released, "cancelled": followed.cancelled, "ticks": len(ticks)}
