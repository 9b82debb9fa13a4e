"""Process isolation (`scylla_worker --isolation process`): each plain handler runs in a child
process, so that a segfault, `os._exit`, an out-of-memory kill or a hung C extension costs
that task alone, never the worker.

Each handler thread owns one child (`Child`), started with multiprocessing's `spawn` method
(a fresh interpreter: a fork would share the parent's database connections and the locks its
other threads hold) and reused task after task. The child sets Django up with the parent's
settings module and database settings, runs one handler at a time, and talks to its thread over
a pipe:

- the thread sends the task and its worker (pickled model instances), and later a stop
  (cancelled, lease lost, the worker stopping), which makes the child's `ctx.check()` raise;
- the child sends the progress the handler sets, then how the handler ended (what it returned
  and the children it spawned, its snooze, or what it raised), what it logged (the child
  captures the task's log as a worker thread does) and what the run used (CPU time and peak
  memory of the child, `resources.ProcessMeter`).

The thread then raises what the handler raised (as an `Abort` with the child's error record,
a `Snooze`, a stop) or returns what it returned, with its children on the task's context: the
worker makes the outcome of it as for a handler run in the thread itself (`outcomes.py`).

Progress and stops go through the parent rather than the database: the parent's heartbeat
already sends progress for every task in hand in one statement and decides when a task must
stop; a child then needs no connection of the worker's own (only the handler's own queries
open one, closed after each task).

When the child dies while it runs a task (a signal, any exit), the run is a worker failure,
as a worker that dies or freezes holding a lease is: the worker writes no outcome and lets the
lease lapse at once (`Task.lapse_lease`), and the monitor's next pass resets it as it resets any
expired lease (back to ready with a TaskTimeout row, counted toward `MAX_LEASES`, aborted
`max_leases_exceeded` at the cap, which a policy's `crashes` retries). The thread starts
another child for its next task. The one exception is a child stopped by the kernel at its
task's CPU limit (`@handler(cpu_limit=...)`, SIGXCPU): that is the task's own doing, and the
task is aborted with the code `cpu_limit`. A stopped task whose handler does not return within
the grace period after the stop has its child killed. A child whose resident memory is past
`--max-memory` after a task is replaced.

`concurrent.futures.ProcessPoolExecutor` does not fit: one dead child breaks the whole pool
(every task in it fails), it cannot kill one hung task, and it has no channel for progress or
stops while a task runs.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import pickle
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ..capture import relay
from ..child import Ran, Setup, child_main
from ..exceptions import Abort, LeaseLost, Parked, ScyllaError, Snooze, TaskCancelled
from ..handlers import Handler, TaskContext
from ..resources import MB, Usage
from ..retries import CPU_LIMIT_CODE

logger = logging.getLogger("scylla_django")

# How long a new child may take to import the project and set Django up.
START_TIMEOUT = 120.0
# How often the parent looks for the child's messages, its death and a stop.
POLL = 0.05


class ChildFailed(RuntimeError):
    """A child process could not start (its Django setup failed, or it died starting)."""


class Child:
    """A child process that runs handlers one at a time for the thread that owns it."""

    def __init__(self, setup: Setup, *, name: str) -> None:
        self.setup = setup
        self.name = name
        self._process: Any = None
        self._conn: Connection | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def start(self) -> None:
        """Start the process and wait until Django is set up in it (ChildFailed if not)."""
        context = multiprocessing.get_context("spawn")
        parent_end, child_end = context.Pipe(duplex=True)
        process = context.Process(
            target=child_main, args=(child_end, self.setup), name=self.name, daemon=True
        )
        process.start()
        child_end.close()
        self._process, self._conn = process, parent_end
        deadline = time.monotonic() + START_TIMEOUT
        while not parent_end.poll(POLL):
            if not process.is_alive() or time.monotonic() >= deadline:
                self.kill()
                raise ChildFailed(f"the child process {self.name} did not start")
        try:
            message = parent_end.recv()
        except (EOFError, OSError) as exc:
            self.kill()
            raise ChildFailed(f"the child process {self.name} did not start") from exc
        if message[0] != "ready":
            self.kill()
            raise ChildFailed(f"the child process {self.name} could not start:\n{message[1]}")
        logger.debug("started child process %s (pid %s)", self.name, process.pid)

    def run(
        self,
        ctx: TaskContext,
        handler: Handler | None,
        *,
        stop_grace: float,
        deadline: float | None,
        cpu_limit: float | None = None,
    ) -> tuple[Any, Ran | None]:
        """Run `handler` on `ctx`'s task in the child (None: the handler of its queue in the
        child's registry); return what it returned and what the run used, or raise what it
        raised (as `Abort` with its error record, or the stop).

        The child dying stops `ctx` with `ChildDied` (a lost lease), raised; one stopped by
        the kernel past `cpu_limit` seconds of CPU time raises `Abort` with code `cpu_limit`.
        A stopped task whose handler
        is still running `stop_grace` seconds after the stop is killed (its stop is raised);
        so is one still running at `deadline` (a `time.monotonic()` moment; `Abort` with
        code `timeout`): either way a new child runs the next task.
        """
        if self._conn is None or self._process is None:
            raise RuntimeError("start() the child first")
        conn = self._conn
        conn.send(("run", handler, ctx.task.queue, ctx.task, ctx.worker, cpu_limit))
        stopped_at: float | None = None
        while True:
            message = self._receive(ctx, cpu_limit)
            if message is not None:
                kind = message[0]
                if kind == "progress":
                    with contextlib.suppress(Exception):  # validated by the child
                        ctx.set_progress(message[1])
                    continue
                return _ended(ctx, message)
            now = time.monotonic()
            if stopped_at is None and ctx.stopped:
                stopped_at = now
                try:
                    ctx.check()
                except ScyllaError as stop:
                    with contextlib.suppress(OSError):
                        conn.send(("stop", stop))
            if stopped_at is not None and now - stopped_at >= stop_grace:
                logger.warning(
                    "%s: the handler of stopped task %s ran on %gs after its stop; killing "
                    "its child process (pid %s)",
                    ctx.worker.name,
                    ctx.task.rn,
                    stop_grace,
                    self.pid,
                )
                self.kill()
                ctx.check()  # raises the stop: nothing is written for the task
            if deadline is not None and now >= deadline:
                self.kill()
                raise Abort("timeout", "the handler ran past its run-time limit")

    def _receive(self, ctx: TaskContext, cpu_limit: float | None) -> tuple[Any, ...] | None:
        """The child's next message, None if none came within `POLL`; `ChildDied` (or the
        abort `cpu_limit`) if the child died."""
        if self._conn is None:
            raise RuntimeError("start() the child first")
        try:
            if self._conn.poll(POLL):
                message: tuple[Any, ...] = self._conn.recv()
                return message
        except (EOFError, OSError):
            pass
        else:
            if self._process.is_alive():
                return None
        self._process.join(timeout=5)
        exitcode = self._process.exitcode
        death = _death(exitcode)
        if cpu_limit is not None and exitcode == -signal.SIGXCPU:
            logger.warning(
                "%s: the child process (pid %s) running %s used its CPU limit of %gs",
                ctx.worker.name,
                self.pid,
                ctx.task.rn,
                cpu_limit,
            )
            self.kill()
            raise Abort(
                CPU_LIMIT_CODE,
                f"the handler used its CPU limit of {cpu_limit:g} s (killed by SIGXCPU)",
                args={"cpu_limit": cpu_limit},
            )
        logger.warning(
            "%s: the child process (pid %s) running %s died: %s; its lease is left to lapse",
            ctx.worker.name,
            self.pid,
            ctx.task.rn,
            death,
        )
        self.kill()
        died = ChildDied(f"the child process running the handler {death}", rn=ctx.task.rn)
        ctx.stop(died)
        raise died

    def close(self, timeout: float = 5.0) -> None:
        """Ask the child to exit; kill it if it has not within `timeout` seconds."""
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send(("exit",))
        if self._process is not None:
            self._process.join(timeout)
        self.kill()

    def kill(self) -> None:
        """Kill the child at once (if it is still there) and forget it."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join(timeout=5)
            with contextlib.suppress(ValueError):
                process.close()
        if conn is not None:
            conn.close()


class Isolation:
    """The children of a worker's handler threads: one each, started on its first task and
    reused, replaced after a crash, a kill or when past `max_memory` (MB, None: no limit)."""

    def __init__(
        self, setup: Setup, *, max_memory: int | None, stop_grace: float, name: str
    ) -> None:
        self.setup = setup
        self.max_memory = max_memory
        self.stop_grace = stop_grace
        self.name = name
        self._local = threading.local()
        self._lock = threading.Lock()
        self._busy: set[Child] = set()
        self._portable: dict[Handler, Handler | None] = {}

    def ready(self) -> Child:
        """This thread's child, started if it has none (ChildFailed if it cannot start)."""
        child: Child | None = getattr(self._local, "child", None)
        if child is None or not child.alive():
            child = Child(self.setup, name=f"{self.name}-{threading.current_thread().name}")
            child.start()
            self._local.child = child
        return child

    def call(
        self,
        ctx: TaskContext,
        handler: Handler,
        record: Callable[[Usage], None],
        *,
        deadline: float | None = None,
        cpu_limit: float | None = None,
    ) -> Any:
        """Run `handler` for `ctx` in this thread's child (see `Child.run`): return what it
        returned, or raise what it raised; `record` gets what the run used, if known."""
        child = self.ready()
        if handler not in self._portable:
            self._portable[handler] = _portable(handler)
        with self._lock:
            self._busy.add(child)
        try:
            result, ran = child.run(
                ctx,
                self._portable[handler],
                stop_grace=self.stop_grace,
                deadline=deadline,
                cpu_limit=cpu_limit,
            )
        except Relayed as relayed:
            if relayed.ran is not None:
                record(relayed.ran.usage)
            raise
        finally:
            with self._lock:
                self._busy.discard(child)
            if not child.alive():
                self._local.child = None
        if ran is not None:
            record(ran.usage)
            self._check_memory(child, ran)
        return result

    def _check_memory(self, child: Child, ran: Ran) -> None:
        """Replace `child` if its resident memory is past `max_memory`."""
        if self.max_memory is None or ran.memory is None:
            return
        if ran.memory > self.max_memory * MB:
            logger.info(
                "%s: child process %s holds %d MB, past the limit of %d MB; replacing it",
                self.name,
                child.pid,
                ran.memory // MB,
                self.max_memory,
            )
            child.close()
            self._local.child = None

    def close(self) -> None:
        """Let this thread's child exit (when the thread ends)."""
        child: Child | None = getattr(self._local, "child", None)
        self._local.child = None
        if child is not None:
            child.close()

    def stop(self) -> None:
        """Kill the children still running a task (the grace period of a shutdown is over:
        their tasks were yielded)."""
        with self._lock:
            busy = list(self._busy)
        for child in busy:
            child.kill()


def _portable(handler: Handler) -> Handler | None:
    """`handler` if a child can find it by its module and name (pickled by reference), else
    None: the child then takes its queue's handler from its own registry."""
    try:
        pickle.dumps(handler)
    except Exception:
        return None
    return handler


def _ended(ctx: TaskContext, message: tuple[Any, ...]) -> tuple[Any, Ran | None]:
    """How a child reported `ctx`'s handler ended: its result (its children put on `ctx`), or
    what it raised, raised here; what it logged goes to the run's log."""
    _, kind, payload, ran, exported = message
    if exported is not None:
        relay(exported)
    if kind == "returned":
        result, children = payload
        ctx.children[:] = children
        return result, ran
    if kind == "snoozed":
        raise _Snoozed(payload, ran)
    if kind == "parked":
        parked = Parked(payload, rn=ctx.task.rn)
        ctx.stop(parked)
        raise parked
    if kind == "stopped":
        ctx.check()  # the parent's stop, if it made one
        raise TaskCancelled(payload, rn=ctx.task.rn)
    error: dict[str, Any] = payload
    if error.get("code") == "exception":
        logger.warning("%s: handler of %s raised %s", ctx.worker.name, ctx.task.rn, error)
    raise _Reported(error, ran)


class Relayed(Exception):
    """What a handler raised in its child process, raised again by its worker thread: the log
    the child sent has its traceback. `ran` is what the run used, if known."""

    ran: Ran | None = None


class _Reported(Abort, Relayed):
    """What a handler raised in its child, as the error record the child made of it."""

    def __init__(self, error: dict[str, Any], ran: Ran | None) -> None:
        super().__init__(
            error["code"],
            error.get("description", ""),
            args=error.get("args"),
            retry=error.get("retry") is True,
        )
        self.ran = ran


class _Snoozed(Snooze, Relayed):
    """A handler's snooze in its child."""

    def __init__(self, delay: Any, ran: Ran | None) -> None:
        super().__init__(delay)
        self.ran = ran


class ChildDied(LeaseLost):
    """The child process running a task's handler died (a signal, an exit): a worker failure,
    with no outcome from the handler. The worker lets the task's lease lapse, as a worker that
    died would have (see the module's docstring)."""


def _death(exitcode: int | None) -> str:
    """How a child process ended, in words: "was killed by SIGKILL", "exited with status 3"."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = str(-exitcode)
        return f"was killed by {name}"
    return f"exited with status {exitcode}"
