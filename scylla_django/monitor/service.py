"""A maintenance service: one job of the monitor, with its own interval and a hook that tests
wait on instead of sleeping."""

from __future__ import annotations

import threading
from typing import ClassVar

from ..text import DurationError, positive_duration


class Service:
    """One maintenance job, run by a `Monitor` every `interval` seconds (the monitor's own
    interval when None).

    A subclass names itself (`name`) and does its job in `work()`, returning its counts by the
    name `MonitorPass` gives them. Database errors propagate: the monitor is the one place that
    retries. Every finished run adds one to `runs` and wakes `wait_for_run()`.
    """

    name: ClassVar[str] = "service"
    at_most: ClassVar[float | None] = None
    """The longest interval the service runs at when it runs at the monitor's (None: the
    monitor's, however long)."""

    def __init__(self, interval: float | None = None) -> None:
        if interval is not None:
            try:
                interval = positive_duration(interval).total_seconds()
            except DurationError:
                raise ValueError(
                    f"{self.name} interval must be a positive number of seconds, not {interval!r}"
                ) from None
        self.interval = interval
        self.runs = 0
        """How many runs have finished."""
        self.last: dict[str, int] = {}
        """The counts of the latest finished run."""
        self._ran = threading.Condition()

    def work(self, using: str) -> dict[str, int]:
        """Do the job once on the database `using`; return what it did, by count name."""
        raise NotImplementedError

    def run(self, using: str) -> dict[str, int]:
        """`work()` once, then count the run and wake whoever waits for it."""
        counts = self.work(using)
        with self._ran:
            self.runs += 1
            self.last = dict(counts)
            self._ran.notify_all()
        return counts

    def wait_for_run(self, runs: int = 1, timeout: float = 60.0) -> bool:
        """Wait until `runs` runs have finished in all (at most `timeout` seconds); whether
        they have. For tests: `n = service.runs`, act, then `service.wait_for_run(n + 1)`."""
        with self._ran:
            return self._ran.wait_for(lambda: self.runs >= runs, timeout)

    def __repr__(self) -> str:
        every = f"{self.interval:g}s"
        if self.interval is None:
            every = "the monitor's interval"
            if self.at_most is not None:
                every += f", {self.at_most:g}s at most"
        return f"<{type(self).__name__} {self.name}, every {every}, {self.runs} runs>"
