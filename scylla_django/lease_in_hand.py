"""What a worker keeps about a task it holds, beside the handler's `TaskContext`
(`ctx.in_hand`): when the lease was taken and the handler started, whether the database knows
of the start, the heartbeats that failed in a row, the progress the database has, whether the
lease was given back, the run-time limit and until when the lease is surely held.

The worker's slots, heartbeat, watchdog and outcome writer read and write it; of the handler's
calls only `check()` reads it (`lease_kept_until`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta


@dataclass(eq=False, kw_only=True)
class LeaseInHand:
    """One lease a worker holds, as the worker tracks it (monotonic times of this process)."""

    started: float = field(default_factory=time.monotonic)
    """When the lease was taken."""
    handler_started: float | None = None
    """When its handler started (None: not yet, a prefetched task waits)."""
    handler_running: bool = False
    """Whether its handler is running now."""
    start_recorded: bool = False
    """Whether the database knows that its handler has started (`Task.handler_started`): a
    heartbeat told it, or the start was recorded before the handler ran. Until then the lease
    is a reservation (see `WorkerOptions.reservation`)."""
    sent_progress: float = 0.0
    """The progress the database has (a heartbeat sends the handler's when it differs)."""
    failed_heartbeats: int = 0
    """Heartbeats of this lease that failed in a row."""
    yielded: bool = False
    """Whether the lease was given back (a shutdown, or a prefetched task behind slow ones)."""
    timeout: timedelta | None = None
    """The task's run-time limit, as the worker resolved it (None: no limit)."""
    lease_kept_until: float | None = None
    """Until when the lease is surely held, as the last heartbeat that was answered tells;
    past it, `TaskContext.check()` raises LeaseLost (None: not tracked)."""
