"""Capturing a task's log while its handler runs: every `logging` record emitted in the
handler's thread (or, for an `async def` handler, in its asyncio task) and what it logs through
`ctx.logger`, kept in memory up to `SCYLLA["TASK_LOG_MAX_BYTES"]` and stored with the task
(`Task.keep_log`) when the handler returns.

A record is matched to its task by a context variable the worker sets around the handler's
call: threads and asyncio tasks each see their own, so concurrent handlers never mix logs.
Under process isolation the child process captures its handler's log the same way and sends
it with the run's outcome (`TaskLog.export`), and the worker adds it to the log of the run
(`relay`).
Records still pass through the loggers' levels as the project configured them; `ctx.logger`
(`scylla_django.task`) logs from INFO unless the project sets its level. Django's own lines on
a Django task's start and finish (the `django.tasks` logger) are left out: the task's History
says as much, and keeping them would store a log for every Django task.
"""

from __future__ import annotations

import functools
import logging
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .conf import scylla_settings
from .exceptions import LeaseLost, TaskCancelled, WorkerStopping
from .handlers import TASK_LOGGER
from .logs import keeps_logs

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Loggers whose records describe the task's run rather than what its handler did.
LIFECYCLE_LOGGERS = frozenset({"django.tasks"})

_current: ContextVar[TaskLog | None] = ContextVar("scylla_task_log", default=None)
_install_lock = threading.Lock()


class TaskLog:
    """One run's log, in memory: its first `cap` bytes, then a marker saying how much was cut."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self.dropped = 0
        self._parts: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        """Append `text`, or as much of it as fits under the cap."""
        data = text.encode("utf-8")
        with self._lock:
            room = self.cap - self.size
            if len(data) <= room:
                self._parts.append(text)
                self.size += len(data)
                return
            if room > 0:
                self._parts.append(data[:room].decode("utf-8", errors="ignore"))
                self.size = self.cap
            self.dropped += len(data) - max(room, 0)

    def exception(self, exc: BaseException) -> None:
        """Append the traceback of what the handler raised (one line for a stop, and none in
        a log that is empty: a run that logged nothing and was stopped keeps no log, its
        History row says why it stopped; so a worker that stops thousands of held tasks at
        once, on a cancel or a shutdown, writes no log for them)."""
        if isinstance(exc, TaskCancelled | LeaseLost | WorkerStopping):
            if self.size:
                self.write(f"stopped: {exc}\n")
        else:
            self.write("".join(traceback.format_exception(exc)))

    def export(self) -> tuple[str, int]:
        """What was kept and how many bytes were left out, for another process (`relay`)."""
        with self._lock:
            return "".join(self._parts), self.dropped

    def merge(self, exported: tuple[str, int]) -> None:
        """Append what another log kept (`export()`), counting what it left out."""
        text, dropped = exported
        self.write(text)
        with self._lock:
            self.dropped += dropped

    def text(self) -> str:
        """The log as kept, ending with the truncation marker if anything was cut."""
        with self._lock:
            text = "".join(self._parts)
            if self.dropped:
                text += (
                    f"\n[log truncated: {self.dropped:,} more bytes were left out "
                    f"(SCYLLA['TASK_LOG_MAX_BYTES'] = {self.cap:,})]\n"
                )
            return text


class CaptureHandler(logging.Handler):
    """Writes each record to the log of the task running in the current context, if any.

    With `skip_task_logger`, leaves out `ctx.logger`'s records: the root's handler does, since
    the handler on `ctx.logger`'s own logger has captured them already.
    """

    def __init__(self, *, skip_task_logger: bool) -> None:
        super().__init__()
        self.skip_task_logger = skip_task_logger
        self.setFormatter(logging.Formatter(FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        if self.skip_task_logger and _otherwise_unhandled(record):
            # Python's last resort prints such records to stderr when no handler is found;
            # being on the root, this handler would silence it.
            last_resort = logging.lastResort
            if last_resort is not None and record.levelno >= last_resort.level:
                last_resort.handle(record)
        log = _current.get()
        if log is None or record.name in LIFECYCLE_LOGGERS:
            return
        if self.skip_task_logger and (
            record.name == TASK_LOGGER or record.name.startswith(TASK_LOGGER + ".")
        ):
            return
        try:
            log.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def _otherwise_unhandled(record: logging.LogRecord) -> bool:
    """Whether no handler but the capture handlers sees `record` (as `Logger.callHandlers`
    walks the loggers)."""
    current: logging.Logger | None = logging.getLogger(record.name)
    while current is not None:
        if any(not isinstance(h, CaptureHandler) for h in current.handlers):
            return False
        current = current.parent if current.propagate else None
    return True


ROOT_HANDLER = CaptureHandler(skip_task_logger=True)
TASK_HANDLER = CaptureHandler(skip_task_logger=False)


def install() -> None:
    """Add the capture handlers to the root logger and to `ctx.logger`'s logger, once.

    On `ctx.logger`'s logger too, so that its records are captured even where the project
    stops them from propagating to the root.
    """
    root, task_logger = logging.getLogger(), _task_logger()
    if (
        ROOT_HANDLER in root.handlers
        and TASK_HANDLER in task_logger.handlers
        and task_logger.level != logging.NOTSET
    ):
        return  # as on every run but the first: no lock taken
    with _install_lock:
        if ROOT_HANDLER not in root.handlers:
            root.addHandler(ROOT_HANDLER)
        if TASK_HANDLER not in task_logger.handlers:
            task_logger.addHandler(TASK_HANDLER)
        if task_logger.level == logging.NOTSET:
            task_logger.setLevel(logging.INFO)


@functools.cache
def _task_logger() -> logging.Logger:
    """`ctx.logger`'s logger (a logger, once made, is the same object for good)."""
    return logging.getLogger(TASK_LOGGER)


def relay(exported: tuple[str, int]) -> None:
    """Add a log another process captured for the run in progress (`TaskLog.export`) to the
    log captured in this context, if any: a child process's, under process isolation."""
    log = _current.get()
    if log is None:
        return
    log.merge(exported)


@contextmanager
def captured() -> Iterator[TaskLog | None]:
    """Capture the log of the handler run in the block (None when no log is kept: no
    `TASK_LOG_STORAGE` is named, or `TASK_LOG_MAX_BYTES` is 0)."""
    if not keeps_logs():
        yield None
        return
    cap = scylla_settings.TASK_LOG_MAX_BYTES
    install()
    log = TaskLog(cap)
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)
