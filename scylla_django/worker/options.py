"""`WorkerOptions`: everything a `TaskWorker` is told, checked once when it is made."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from datetime import timedelta

from ..conf import heartbeat_interval_for, scylla_settings
from ..handlers import HandlerRegistry
from ..handlers import registry as default_registry
from ..resources import host_load
from ..validation import validate_queues

ISOLATIONS = ("thread", "process")
"""Where plain handlers run: on the worker's threads, or in child processes."""


def _configured_lease_length() -> timedelta:
    return scylla_settings.LEASE_LENGTH


def _configured_timeout_grace() -> timedelta:
    return scylla_settings.TIMEOUT_GRACE


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """How a worker works: which queues, how many tasks at a time, how long its leases are.

    - `queues`: the queues to lease from; each needs a handler in `registry`.
    - `concurrency`: handlers running at a time: plain ones on handler threads (started as
      their tasks come, up to `concurrency`), `async def` ones as coroutines on one event loop
      thread, with no thread each (so `concurrency` may be in the tens of thousands for them).
    - `prefetch`: tasks leased beyond `concurrency`, at most, waiting for a free handler
      (their leases are heartbeated as the running ones'); so that one statement leases, and
      finishes, many tasks even at `concurrency` 1. Taken only while the handlers are quick
      (the last `concurrency` runs each under `slots.QUICK`, 50 ms), and only as many as the
      handlers get through in about 50 ms at their recent pace. A task found slow once it
      runs holds the tasks prefetched behind it for `slots.GIVE_BACK` (1 s) at most: when
      every handler is that busy, they are given back. 0: never.
    - `lease_length`: the lease length (default `SCYLLA['LEASE_LENGTH']` when made).
    - `heartbeat_interval`: seconds between heartbeats (default a quarter of the lease length,
      so three heartbeats fit in a lease with room to spare).
    - `poll_interval`: seconds between polls when idle.
    - `max_tasks`: stop leasing after this many tasks, finish them and stop (None: no limit).
    - `max_memory`: megabytes; a worker whose resident memory is past it after a task stops
      leasing, finishes its tasks and stops, and under process isolation a child past it is
      replaced (None: no limit). A worker stopped by either limit is `recycled`: a
      supervisor starts another in its place.
    - `max_load`: the host's load average (`os.getloadavg()`, one minute) over which the
      worker leases nothing: it finishes what it holds, and leases again once the load is
      back at or under it (None: no limit). `load_reader` reads the load (a test gives its
      own).
    - `isolation`: `"thread"` (default) runs plain handlers on the worker's threads;
      `"process"` runs each in a child process of its thread's own (see `isolation.py`).
    - `grace_period`: seconds a shutdown waits for the handlers still running.
    - `timeout_grace`: how long a task past its run-time limit may still return before it is
      aborted (default `SCYLLA['TIMEOUT_GRACE']` when made).
    - `registry`: the handlers; `using`: the database alias.
    - `write_size`, `write_wait`: outcomes are written together, in one statement, when
      `write_size` are waiting or `write_wait` seconds after the first of them, whichever
      comes first (at once when no handler is running, and on shutdown); `write_wait` is
      under a tenth of the lease length, so an outcome is written long before its lease
      could expire.
    - `summary_interval`: seconds between INFO summaries (per-task lines are DEBUG).
    - `listen`: on PostgreSQL, LISTEN for ready tasks and cancellations (see `listener.py`)
      over the settings of the database `SCYLLA["LISTEN_DATABASE"]` names for `using` (by
      default `using` itself), or over `listen_dsn` (a session, not a transaction-mode
      pooler); polling goes on as a fallback.

    ValueError when an option is out of range or a queue has no handler (ImproperlyConfigured
    when a default read from the settings is invalid).
    """

    queues: Sequence[str]
    concurrency: int = 1
    prefetch: int = 64
    lease_length: timedelta = dataclasses.field(default_factory=_configured_lease_length)
    heartbeat_interval: float | None = None
    poll_interval: float = 1.0
    max_tasks: int | None = None
    max_memory: int | None = None
    max_load: float | None = None
    load_reader: Callable[[], float] = dataclasses.field(default=host_load, compare=False)
    isolation: str = "thread"
    grace_period: float = 30.0
    timeout_grace: timedelta = dataclasses.field(default_factory=_configured_timeout_grace)
    registry: HandlerRegistry = default_registry
    using: str = "default"
    write_size: int = 100
    write_wait: float = 0.002
    summary_interval: float = 60.0
    listen: bool = True
    listen_dsn: str | None = None

    def __post_init__(self) -> None:
        queues = tuple(validate_queues(list(self.queues)))
        object.__setattr__(self, "queues", queues)
        missing = [q for q in queues if self.registry.get(q) is None]
        if missing:
            known = ", ".join(self.registry.queues()) or "none"
            raise ValueError(
                f"No handler is registered for queue(s) {', '.join(missing)} (registered: {known})."
            )
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.max_tasks is not None and self.max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        if self.max_memory is not None and self.max_memory < 1:
            raise ValueError("max_memory must be at least 1 (megabytes)")
        if self.max_load is not None and not (math.isfinite(self.max_load) and self.max_load > 0):
            raise ValueError("max_load must be a positive number")
        if self.isolation not in ISOLATIONS:
            raise ValueError(
                f"isolation must be one of {', '.join(ISOLATIONS)}, not {self.isolation!r}"
            )
        if self.timeout_grace <= timedelta(0):
            raise ValueError("timeout_grace must be positive")
        if self.prefetch < 0:
            raise ValueError("prefetch must be 0 or more")
        if self.write_size < 1:
            raise ValueError("write_size must be at least 1")
        if self.heartbeat_seconds >= self.lease_length.total_seconds():
            raise ValueError(
                f"The heartbeat interval ({self.heartbeat_seconds:g} s) must be shorter than "
                f"the lease length ({self.lease_length.total_seconds():g} s)."
            )
        if not 0 <= self.write_wait < self.lease_length.total_seconds() / 10:
            raise ValueError(
                f"write_wait ({self.write_wait:g} s) must be 0 or more and under a tenth of the "
                f"lease length ({self.lease_length.total_seconds():g} s)."
            )

    @property
    def heartbeat_seconds(self) -> float:
        """The heartbeat interval in force: `heartbeat_interval`, or a quarter of the lease."""
        return self.heartbeat_interval or heartbeat_interval_for(self.lease_length).total_seconds()

    @property
    def reservation(self) -> timedelta:
        """How long a lease lasts until the database knows its handler has started: three
        heartbeat intervals, and half the lease length at least (7.5 s for the default 10 s
        lease, whose heartbeat comes every 2.5 s), the lease length at most.

        The worker's leases are reservations first (`Task.objects.lease(reservation=...)`):
        its heartbeat reports the tasks whose handlers have started, which makes their leases
        full ones, and extends the others by a reservation again. Three intervals leave two
        heartbeats held up by a busy database, or by a worker holding thousands of tasks, to
        be answered before the reservation could expire under a handler that started (which
        would make the task run twice). So a crash strands the tasks its worker held but had
        not started for three quarters of a lease at the defaults, not a whole one
        (docs/howto/crashes.md)."""
        length = self.lease_length
        return min(length, max(length / 2, timedelta(seconds=3 * self.heartbeat_seconds)))
