"""The worker runtime: lease tasks when there is free capacity, run their handlers in a thread
pool, heartbeat them from a thread of its own, finish them, and shut down gracefully.

`TaskWorker` is a plain class; `manage.py scylla_worker` only parses arguments and calls it.

Threads:

- the caller's thread runs `run()`: it leases (pull model: only as many tasks as there are free
  slots), hands tasks to the pool, and on shutdown yields what is still in flight;
- a heartbeat thread extends every in-flight lease each `heartbeat_interval`, sends progress,
  and flags a task whose heartbeat says it was cancelled or its lease was lost, or that failed
  `SCYLLA['HEARTBEAT_FAILURES']` times in a row (the worker then gives it up rather than run on
  unsupervised);
- the pool's threads run handlers and write the outcome (complete or abort).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import Error as DatabaseError
from django.db import close_old_connections, connections

from .conf import scylla_settings
from .exceptions import (
    Abort,
    InvalidTransition,
    LeaseLost,
    ScyllaError,
    TaskCancelled,
    WorkerStopping,
)
from .handlers import HandlerRegistry, TaskContext
from .handlers import registry as default_registry
from .models import Task, Worker
from .validation import validate_queues

logger = logging.getLogger("scylla_django")

MAX_BACKOFF = 30.0


def exception_error(exc: BaseException) -> dict[str, Any]:
    """The error recorded when a handler raises: code `exception`, with type, message, trace."""
    message = str(exc).replace("\x00", "\\0")  # NUL cannot be stored in JSON columns
    trace = "".join(traceback.format_exception(exc)).replace("\x00", "\\0")
    return {
        "code": "exception",
        "args": {
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": message[:2000],
            "traceback": trace[-8000:],
        },
        "description": f"{type(exc).__name__}: {message}"[:500],
    }


class TaskWorker:
    """Runs the handlers of `queues` with at most `concurrency` tasks at a time."""

    def __init__(
        self,
        queues: Sequence[str],
        *,
        concurrency: int = 1,
        lease_timeout: timedelta | None = None,
        heartbeat_interval: float | None = None,
        poll_interval: float = 1.0,
        max_tasks: int | None = None,
        grace_period: float = 30.0,
        registry: HandlerRegistry = default_registry,
        using: str = "default",
    ) -> None:
        self.queues = validate_queues(list(queues))
        missing = [q for q in self.queues if registry.get(q) is None]
        if missing:
            known = ", ".join(registry.queues()) or "none"
            raise ValueError(
                f"No handler is registered for queue(s) {', '.join(missing)} (registered: {known})."
            )
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.lease_timeout = lease_timeout or scylla_settings.LEASE_TIMEOUT
        self.heartbeat_interval = heartbeat_interval or self.lease_timeout.total_seconds() / 3
        if self.heartbeat_interval >= self.lease_timeout.total_seconds():
            raise ValueError(
                f"The heartbeat interval ({self.heartbeat_interval:g} s) must be shorter than "
                f"the lease timeout ({self.lease_timeout.total_seconds():g} s)."
            )
        self.poll_interval = poll_interval
        self.max_tasks = max_tasks
        self.grace_period = grace_period
        self.registry = registry
        self.using = using
        self.worker: Worker | None = None
        self.leased = 0
        self.stopping = threading.Event()
        self._done = threading.Event()
        self._in_flight: dict[int, TaskContext] = {}
        self._lock = threading.Lock()
        self._slot_freed = threading.Event()

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.worker.name if self.worker else "worker-?"

    def stop(self) -> None:
        """Ask `run()` to shut down gracefully (safe from a signal handler)."""
        self.stopping.set()
        self._slot_freed.set()

    def run(self, *, once: bool = False) -> None:
        """Register, work until stopped (or after one batch with `once`), shut down gracefully.

        With `once`, lease at most one batch (up to `concurrency` tasks), finish it and return.
        """
        self.worker = self._retry(self._register, "register the worker")
        if self.worker is None:
            return
        logger.info(
            "%s started: queues %s, concurrency %d, lease %gs, heartbeat every %gs",
            self.name,
            ",".join(self.queues),
            self.concurrency,
            self.lease_timeout.total_seconds(),
            self.heartbeat_interval,
        )
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="scylla-heartbeat")
        heartbeat.daemon = True
        heartbeat.start()
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="scylla-task")
        try:
            self._lease_loop(pool, once)
            self._wait(lambda: self.stopping.is_set())  # finish the tasks in hand
        finally:
            self._shutdown(pool)
            self._done.set()
            heartbeat.join(timeout=5)
            if not connections[self.using].in_atomic_block:
                connections[self.using].close()  # this thread's; others closed their own

    def _register(self) -> Worker:
        return Worker.objects.db_manager(self.using).register(
            self.queues,
            self.concurrency,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            heartbeat_interval=self.heartbeat_interval,
            lease_timeout=self.lease_timeout,
        )

    def _lease_loop(self, pool: ThreadPoolExecutor, once: bool) -> None:
        backoff = 0.0
        while not self.stopping.is_set():
            if self.max_tasks is not None and self.leased >= self.max_tasks:
                break
            free = self.concurrency - self.in_flight_count()
            if free > 0:
                if self.max_tasks is not None:
                    free = min(free, self.max_tasks - self.leased)
                try:
                    close_old_connections()
                    tasks = Task.objects.using(self.using).lease(
                        self.worker_model, self.queues, limit=free, timeout=self.lease_timeout
                    )
                    backoff = 0.0
                except DatabaseError as exc:
                    backoff = min(MAX_BACKOFF, backoff * 2 or 1.0)
                    logger.warning("%s cannot lease (%s); retrying in %gs", self.name, exc, backoff)
                    connections[self.using].close()
                    self.stopping.wait(backoff)
                    continue
                for task in tasks:
                    self._start(pool, task)
                if once:
                    break
                if tasks and len(tasks) == free:
                    continue  # there may be more ready tasks: fill the free slots at once
            self._slot_freed.wait(self.poll_interval)
            self._slot_freed.clear()

    def _start(self, pool: ThreadPoolExecutor, task: Task) -> None:
        ctx = TaskContext(task, self.worker_model)
        with self._lock:
            self._in_flight[task.pk] = ctx
        self.leased += 1
        logger.info(
            "%s leased %s (queue %s, attempt %d)", self.name, task.rn, task.queue, task.attempts
        )
        pool.submit(self._execute, ctx)

    def _wait(self, give_up: Callable[[], bool]) -> None:
        """Wait until no handler is running, or `give_up()` is true."""
        while self.in_flight_count() and not give_up():
            self._slot_freed.wait(0.1)
            self._slot_freed.clear()

    def _shutdown(self, pool: ThreadPoolExecutor) -> None:
        """Yield what is still in flight, give handlers the grace period, record the stop."""
        for ctx in self.in_flight():
            self._yield(ctx)
        pool.shutdown(wait=False)
        deadline = time.monotonic() + self.grace_period
        self._wait(lambda: time.monotonic() >= deadline)
        left = self.in_flight()
        if left:
            logger.warning(
                "%s: %d handler(s) still running after the %gs grace period: %s",
                self.name,
                len(left),
                self.grace_period,
                ", ".join(ctx.task.rn for ctx in left),
            )
        try:
            self.worker_model.stop()
        except DatabaseError as exc:
            logger.warning("%s could not record its stop: %s", self.name, exc)
        logger.info("%s stopped after leasing %d task(s)", self.name, self.leased)

    def _yield(self, ctx: TaskContext) -> None:
        ctx.yielded = True  # first: a handler returning now still gets its outcome written
        ctx.stop(WorkerStopping(f"{self.name} is stopping", rn=ctx.task.rn))
        try:
            ctx.task.yield_lease(self.worker_model)
            logger.info("%s yielded %s (queue %s)", self.name, ctx.task.rn, ctx.task.queue)
        except (ScyllaError, DatabaseError) as exc:
            logger.warning("%s could not yield %s: %s", self.name, ctx.task.rn, exc)

    # -- running a task ---------------------------------------------------------------------

    def _execute(self, ctx: TaskContext) -> None:
        task = ctx.task
        close_old_connections()
        try:
            func = self.registry.get(task.queue)
            assert func is not None, "leased a task of a queue without a handler"
            try:
                result = func(ctx)
            except (TaskCancelled, LeaseLost, WorkerStopping) as exc:
                logger.info("%s stopped %s: %s", self.name, task.rn, exc)
                return
            except Abort as exc:
                self._finish(ctx, errors=[exc.as_error()])
                return
            except Exception as exc:  # a handler bug aborts its task, never the worker
                logger.warning("%s: handler of %s raised %r", self.name, task.rn, exc)
                self._finish(ctx, errors=[exception_error(exc)])
                return
            self._finish(ctx, result=result)
        finally:
            with self._lock:
                self._in_flight.pop(task.pk, None)
            close_old_connections()
            self._slot_freed.set()

    def _finish(
        self, ctx: TaskContext, *, result: Any = None, errors: list[dict[str, Any]] | None = None
    ) -> None:
        """Complete (or, given `errors`, abort) the task unless it was stopped.

        Database errors are retried with backoff, so a blip does not lose an outcome.
        """
        task, worker = ctx.task, self.worker_model
        if ctx.stopped and not ctx.yielded:
            logger.info("%s: %s was stopped; its outcome is not written", self.name, task.rn)
            return
        for attempt in range(5):
            try:
                if errors is None:
                    task.complete(worker, result)
                else:
                    task.abort(worker, errors)
            except (TaskCancelled, LeaseLost) as exc:
                logger.info("%s could not finish %s: %s", self.name, task.rn, exc)
            except InvalidTransition:
                pass  # finished already: an earlier attempt committed but its reply was lost
            except DatabaseError as exc:
                logger.warning("%s could not finish %s (%s); retrying", self.name, task.rn, exc)
                connections[self.using].close()
                time.sleep(min(MAX_BACKOFF, 0.5 * 2**attempt))
                continue
            except ValidationError as exc:  # a result that is not JSON, or too large
                logger.warning("%s: the result of %s was rejected: %s", self.name, task.rn, exc)
                errors = [{"code": "invalid_result", "args": {}, "description": str(exc)[:500]}]
                continue
            else:
                outcome = "completed" if errors is None else "aborted"
                logger.info("%s %s %s (queue %s)", self.name, outcome, task.rn, task.queue)
            return

    # -- heartbeats -------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._done.wait(self.heartbeat_interval):
            close_old_connections()
            for ctx in self.in_flight():
                if not ctx.stopped:  # cancelled, lost or yielded: a heartbeat would undo a yield
                    self._heartbeat(ctx)
            try:
                self.worker_model.touch()
            except DatabaseError:
                connections[self.using].close()
        connections.close_all()

    def _heartbeat(self, ctx: TaskContext) -> None:
        max_failures = scylla_settings.HEARTBEAT_FAILURES
        try:
            ctx.task.heartbeat(self.worker_model, progress=ctx.progress, timeout=self.lease_timeout)
            ctx.failed_heartbeats = 0
        except (TaskCancelled, LeaseLost) as exc:
            logger.info("%s: %s", self.name, exc)
            ctx.stop(exc)
        except InvalidTransition:
            pass  # the handler finished the task since we looked
        except Exception as exc:  # the database, mostly; never let this thread die
            ctx.failed_heartbeats += 1
            logger.warning(
                "%s: heartbeat of %s failed (%d/%d): %r",
                self.name,
                ctx.task.rn,
                ctx.failed_heartbeats,
                max_failures,
                exc,
            )
            connections[self.using].close()
            if ctx.failed_heartbeats >= max_failures:
                ctx.stop(
                    LeaseLost(
                        f"{max_failures} heartbeats in a row failed; giving the task up",
                        rn=ctx.task.rn,
                    )
                )

    # -- helpers ----------------------------------------------------------------------------

    @property
    def worker_model(self) -> Worker:
        assert self.worker is not None, "the worker is not registered yet"
        return self.worker

    def in_flight(self) -> list[TaskContext]:
        with self._lock:
            return list(self._in_flight.values())

    def in_flight_count(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def _retry(self, action: Callable[[], Worker], what: str) -> Worker | None:
        backoff = 0.0
        while not self.stopping.is_set():
            try:
                close_old_connections()
                return action()
            except DatabaseError as exc:
                backoff = min(MAX_BACKOFF, backoff * 2 or 1.0)
                logger.warning("cannot %s (%s); retrying in %gs", what, exc, backoff)
                connections[self.using].close()
                self.stopping.wait(backoff)
        return None
