"""What a worker did, counted, with a condition to wait on: the test hooks of the worker (the
monitor's are its services' `wait_for_run()`).

A test that drives a `TaskWorker` on a thread waits on these instead of sleeping or polling the
database: `n = worker.hooks.count("beat")`, act, then `worker.hooks.wait_for("beat", n + 1)`.
Each name counts one kind of step, at the moment the worker's own state reflects it (a task is
in a slot before `leased` counts it):

- `leased`: tasks leased into the worker's slots (by the lease loop or a refill);
- `started`: handlers started;
- `written`: outcomes written (or refused) and their slots released;
- `beat`: heartbeat statements sent and answered;
- `recorded`: starts recorded before a handler ran (a task whose earlier lease expired
  before its handler started);
- `yielded`: tasks given back (on shutdown, or prefetched tasks behind slow ones);
- `given_up`: handlers given up (past their run-time limit, or their lease lost);
- `held_back`: passes of the lease loop that leased nothing because the host's load was over
  `--max-load`;
- `passes`: passes of the lease loop begun;
- `idle`: passes of the lease loop that ended waiting for a wake-up (a notification, a freed
  slot, the next poll). When `passes` equals `idle` and no wake-up is pending, the worker
  takes a new task only when something wakes it.

Counting costs a lock and an integer: production workers count too, and nothing reads them.
"""

from __future__ import annotations

import threading
from typing import Literal, get_args

HookName = Literal[
    "leased",
    "started",
    "written",
    "beat",
    "recorded",
    "yielded",
    "given_up",
    "held_back",
    "passes",
    "idle",
]
NAMES: tuple[HookName, ...] = get_args(HookName)


class WorkerHooks:
    """The counts of a worker's steps, each one waited on with `wait_for()`."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = dict.fromkeys(NAMES, 0)
        self._changed = threading.Condition()

    def note(self, name: HookName, n: int = 1) -> None:
        """Count `n` steps of kind `name` and wake whoever waits for them."""
        if n <= 0:
            return
        with self._changed:
            self._counts[name] += n
            self._changed.notify_all()

    def count(self, name: HookName) -> int:
        """How many steps of kind `name` the worker took so far."""
        if name not in self._counts:
            raise ValueError(f"no worker hook named {name!r}: one of {', '.join(NAMES)}")
        with self._changed:
            return self._counts[name]

    def wait_for(self, name: HookName, count: int = 1, timeout: float = 60.0) -> bool:
        """Wait until `count` steps of kind `name` were taken in all (at most `timeout`
        seconds); whether they were."""
        if name not in self._counts:
            raise ValueError(f"no worker hook named {name!r}: one of {', '.join(NAMES)}")
        with self._changed:
            return self._changed.wait_for(lambda: self._counts[name] >= count, timeout)

    def idle(self) -> bool:
        """Whether every pass of the lease loop begun so far has ended waiting for a wake-up
        (read under one lock: no pass begins between the two counts)."""
        with self._changed:
            return self._counts["passes"] == self._counts["idle"] >= 1

    def __repr__(self) -> str:
        counts = ", ".join(f"{name} {self._counts[name]}" for name in NAMES)
        return f"<WorkerHooks {counts}>"
