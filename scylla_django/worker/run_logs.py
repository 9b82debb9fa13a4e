"""A run's log kept: what a handler logged while it ran (`capture.py`), stored before its
outcome is written, and named on the task's row by the outcome's own write when it completes or
aborts the task, else by `Task.keep_log`'s. The storage's failure costs the log, never the
task's outcome.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from django.db import connections

from .. import logs
from ..capture import TaskLog
from ..handlers import TaskContext
from ..models import Outcome

logger = logging.getLogger("scylla_django")


class RunLogs:
    """Keeps the logs of the runs of the worker called `name()`; without `keep_logs` they are
    captured but not stored (a dry run: the storage is not rolled back with the database)."""

    def __init__(self, name: Callable[[], str], *, keep_logs: bool = True) -> None:
        self.name = name
        self.keep_logs = keep_logs

    def logged(
        self, ctx: TaskContext, log: TaskLog | None, outcome: Outcome | None
    ) -> Outcome | None:
        """Store what the handler logged, if anything, before its outcome is written: named on
        the row by the outcome's own write when it completes or aborts the task (no statement
        of its own), else by `Task.keep_log`'s."""
        if not self.keep_logs:
            return outcome
        if log is None or not log.size or outcome is None or outcome.snooze is not None:
            self.keep(ctx, log)
            return outcome
        try:
            return dataclasses.replace(outcome, log=logs.save_log(ctx.task.rn, log.text()))
        except Exception:  # the storage's failure costs the log, not the task's outcome
            logger.exception("%s: could not keep the log of %s", self.name(), ctx.task.rn)
            return outcome

    def keep(self, ctx: TaskContext, log: TaskLog | None) -> None:
        """Store what the handler logged, if anything, before its outcome is written."""
        if log is None or not log.size:
            return
        try:
            ctx.task.keep_log(log.text())
        except Exception:  # the storage's failure costs the log, not the task's outcome
            logger.exception("%s: could not keep the log of %s", self.name(), ctx.task.rn)

    def keep_apart(self, ctx: TaskContext, log: TaskLog) -> None:
        """`keep` off the event loop (a storage may be slow), on a connection closed after."""
        try:
            self.keep(ctx, log)
        finally:
            connections.close_all()  # this pool thread's own: not kept between tasks
