"""The child process of `scylla_worker --isolation process` (see `worker/isolation.py`, its
parent's side): it sets Django up as the parent has it, then runs the handlers of the tasks the
parent sends, one at a time, and reports how each ended (what it returned and the children it
spawned, its snooze, what it raised), what it logged and what it used: the worker makes the
task's outcome of that, as it does for a handler run in its own threads.

This module is what a new child imports before Django is set up: it imports no model at import
time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import os
import pickle
import queue
import signal
import threading
import traceback
from collections.abc import Iterable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from .exceptions import (
    Abort,
    LeaseLost,
    Parked,
    Snooze,
    TaskCancelled,
    WorkerStopping,
    error_record,
    exception_error,
)
from .handlers import Handler, TaskContext
from .resources import Usage

_STOPS = (TaskCancelled, LeaseLost, WorkerStopping)


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a new child needs to run the parent's handlers: the settings module, the database
    settings the parent's connections use (the same databases, whatever changed them at run
    time, as a test run does), and the modules of the handlers it may run, imported after
    Django is set up (so that a handler found by its queue, not by its name, is registered)."""

    settings_module: str | None
    databases: dict[str, dict[str, Any]]
    modules: tuple[str, ...] = ()

    @classmethod
    def of_this_process(cls, handlers: Iterable[Handler] = ()) -> Setup:
        """This process's settings, and the modules of `handlers`."""
        from django.db import connections

        databases = {alias: dict(connections[alias].settings_dict) for alias in connections}
        modules = sorted({h.__module__ for h in handlers if h.__module__ != "__main__"})
        return cls(os.environ.get("DJANGO_SETTINGS_MODULE"), databases, tuple(modules))


@dataclasses.dataclass(frozen=True)
class Ran:
    """What a child reports after a task: what the run used and its resident memory now."""

    usage: Usage
    memory: int | None


class _ChildContext(TaskContext):
    """The context a handler gets in a child: progress goes to the parent at once."""

    def __init__(self, task: Any, worker: Any, send: Any) -> None:
        super().__init__(task, worker)
        self._send = send

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        self._send(("progress", self.progress))


def child_main(conn: Connection, setup: Setup) -> None:
    """The child process: set Django up, then run the tasks the parent sends until told to
    exit (or until the parent is gone)."""
    # A group of its own: a terminal's Ctrl-C reaches the worker, which stops the handler
    # through `ctx.check()`.
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _set_up(setup)
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send(("failed", traceback.format_exc()))
        return
    lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with lock:
            conn.send(message)

    jobs: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
    running: list[TaskContext] = []

    def read() -> None:
        """The parent's messages: tasks for the main thread, stops for the running task."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                os._exit(1)  # the parent is gone: no one would write this task's outcome
            except Exception as exc:  # a task that cannot be unpickled here: its error
                jobs.put(("unreadable", exc))
                continue
            if message[0] == "stop":
                if running:
                    running[0].stop(message[1])
            elif message[0] == "run":
                jobs.put(message)
            else:
                jobs.put(None)
                return

    threading.Thread(target=read, name="scylla-child-reader", daemon=True).start()
    send(("ready",))
    job = jobs.get()
    while job is not None:
        if job[0] == "unreadable":
            send(("done", "raised", exception_error(job[1]), None, None))
            job = jobs.get()
            continue
        _, handler, queue_name, task, worker, cpu_limit = job
        ctx = _ChildContext(task, worker, send)
        running[:] = [ctx]
        with cpu_limited(cpu_limit):
            message = _run_here(ctx, handler, queue_name)
        send(message)
        running.clear()
        job = jobs.get()


@contextlib.contextmanager
def cpu_limited(seconds: float | None) -> Iterator[None]:
    """Let the block use at most `seconds` of CPU time (user and system, rounded up to whole
    seconds as `RLIMIT_CPU` counts them): past it the kernel sends this process SIGXCPU, which
    ends it (without a core file: `RLIMIT_CORE` is 0 while the limit is on). `RLIMIT_CPU`
    counts the whole life of the process, so the limit is set past what it has used so far,
    and lifted again after the block."""
    if seconds is None:
        yield
        return
    import resource  # POSIX only, as process isolation is

    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    cpu = resource.getrlimit(resource.RLIMIT_CPU)
    core = resource.getrlimit(resource.RLIMIT_CORE)
    soft = math.ceil(used + seconds)
    for bound in cpu:
        if bound != resource.RLIM_INFINITY:
            soft = min(soft, bound)
    resource.setrlimit(resource.RLIMIT_CORE, (0, core[1]))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, cpu[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CPU, cpu)
        resource.setrlimit(resource.RLIMIT_CORE, core)


def _set_up(setup: Setup) -> None:
    """Django, configured as in the parent, with no connection inherited or open."""
    if setup.settings_module:
        os.environ["DJANGO_SETTINGS_MODULE"] = setup.settings_module
    from django.conf import settings

    settings.DATABASES = setup.databases
    import django

    django.setup()  # the apps' ready() registers the handlers of their handlers.py
    for module in setup.modules:
        importlib.import_module(module)


def _run_here(ctx: TaskContext, handler: Handler | None, queue_name: str) -> tuple[Any, ...]:
    """Run the handler in this child, capturing its log; the message that reports how it
    ended: ("done", kind, payload, what it used, its log), the kind one of "returned" (the
    payload: the result and the children spawned), "snoozed" (the delay), "parked" (what it
    waits for), "stopped" (why) or
    "raised" (the error record)."""
    from django.db import close_old_connections

    from .capture import captured
    from .handlers import registry
    from .resources import ProcessMeter, current_memory

    meter = ProcessMeter()
    kind: str = "raised"
    payload: Any = None
    with captured() as log:
        try:
            found = handler if handler is not None else registry.get(queue_name)
            if found is None:
                raise LookupError(f"no handler for queue {queue_name!r} in the child process")
            kind, payload = "returned", (found(ctx), ctx.children)
        except Parked as exc:  # the handler parked its task: the lease is given back
            kind, payload = "parked", str(exc)
        except _STOPS as exc:  # the worker's stop: the worker's log line says so
            kind, payload = "stopped", str(exc)
        except BaseException as exc:
            if log is not None:
                log.exception(exc)
            if isinstance(exc, Snooze):
                kind, payload = "snoozed", exc.delay
            elif isinstance(exc, Abort):
                payload = exc.as_error()
            else:
                payload = exception_error(exc)
    close_old_connections()  # the handler's own queries: as at the end of a request
    ran = Ran(meter.usage(), current_memory())
    exported = log.export() if log is not None else None
    message: tuple[Any, ...] = ("done", kind, payload, ran, exported)
    try:
        pickle.dumps(message)
    except Exception as exc:
        error = error_record("invalid_result", str(exc)[:500])
        message = ("done", "raised", error, ran, exported)
    return message
