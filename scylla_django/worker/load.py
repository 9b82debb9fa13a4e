"""`--max-load`: whether the host's load keeps a worker from leasing now (the lease loop and
the bundlers of bundle handlers ask the same gate)."""

from __future__ import annotations

import logging
import threading

from django.db import Error as DatabaseError

from ..models import Worker
from .database import WorkerConnection
from .options import WorkerOptions

logger = logging.getLogger("scylla_django")


class LoadGate:
    """`--max-load`: whether the host's load keeps the worker from leasing now. A change
    either way is logged and recorded on the worker's row (`Worker.overload`), where "why is
    this task waiting" reads it."""

    def __init__(self, options: WorkerOptions, worker: Worker, connection: WorkerConnection):
        self.options = options
        self.worker = worker
        self.connection = connection
        self.load: float | None = None  # the load that keeps it from leasing, None: it leases
        self._lock = threading.Lock()  # the lease loop and the bundlers ask it

    def over(self) -> bool:
        """Read the load (when there is a limit); True while it is over the limit."""
        limit = self.options.max_load
        if limit is None:
            return False
        try:
            load = float(self.options.load_reader())
        except (OSError, ValueError) as exc:  # no load average here: lease as without a limit
            logger.warning("%s cannot read the host's load: %s", self.worker.name, exc)
            return False
        over = load if load > limit else None
        with self._lock:
            changed = (over is None) != (self.load is None)
            self.load = over
        if changed:
            if over is not None:
                logger.info(
                    "%s leases nothing: the host's load %.2f is over its --max-load %g",
                    self.worker.name,
                    load,
                    limit,
                )
            else:
                logger.info(
                    "%s leases again: the host's load %.2f is back under its --max-load %g",
                    self.worker.name,
                    load,
                    limit,
                )
            self._record(over)
        return over is not None

    def _record(self, load: float | None) -> None:
        try:
            with self.connection.used():
                self.worker.record_overload(load)
        except DatabaseError as exc:  # said again at the next change; leasing goes on
            self.connection.discard()
            logger.warning("%s could not record its load: %s", self.worker.name, exc)
