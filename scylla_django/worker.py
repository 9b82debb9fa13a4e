"""The worker runtime: lease tasks when there is free capacity, run their handlers in threads,
heartbeat them from a thread of its own, write their outcomes in batches, and shut down
gracefully.

`TaskWorker` is a plain class; `manage.py scylla_worker` only parses arguments and calls it.

Threads:

- the caller's thread runs `run()`: it leases (pull model: as many tasks as there are free
  slots, in one statement), hands them to the handler threads, and on shutdown yields what is
  still in flight;
- `concurrency` handler threads run handlers, one task at a time each. A thread whose task
  was the only one in hand writes the outcome itself and leases the next task in the same
  statement, which it runs at once, on a database connection of its own (not the handler's).
  `async def` handlers run on one event loop thread instead, as many at once as there are free
  slots, with the same `ctx` (`ctx.check()` and `ctx.set_progress()` are plain calls);
- a heartbeat thread extends every in-flight lease in one statement each `heartbeat_interval`
  (at once when told a task of this worker was cancelled), sends progress, and stops a task
  whose lease the database refused (cancelled, lost, aborted by the monitor) or whose
  heartbeats failed `SCYLLA['HEARTBEAT_FAILURES']` times in a row (the worker then gives it up
  rather than run on unsupervised);
- a writer thread writes the other outcomes in batches, each row fenced on its lease, and
  leases into the slots they free in the same statement; through a database outage it keeps
  retrying the outcomes until the database answers or the grace period of a shutdown ends;
- on PostgreSQL, a listener thread wakes the lease loop when tasks become ready and the
  heartbeat thread when a task of this worker is cancelled (see `listener.py`).

Handler threads are daemon threads: a handler that ignores `ctx.check()` cannot keep the
process alive after the grace period (its task was yielded already); `abandoned` names them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import Error as DatabaseError
from django.db import close_old_connections, connections

from . import db
from .conf import scylla_settings
from .exceptions import (
    Abort,
    InvalidTransition,
    LeaseLost,
    ScyllaError,
    TaskCancelled,
    WorkerStopping,
    error_record,
    exception_error,
)
from .handlers import HandlerRegistry, TaskContext
from .handlers import registry as default_registry
from .listener import Listener
from .models import Outcome, Task, Worker
from .retries import database_retry_delay
from .validation import validate_json, validate_queues

logger = logging.getLogger("scylla_django")


class TaskWorker:
    """Runs the handlers of `queues` with at most `concurrency` tasks at a time.

    - `batch_size`, `batch_wait`: outcomes are written when `batch_size` are ready or
      `batch_wait` seconds after the first of a batch, whichever comes first.
    - `summary_interval`: seconds between INFO summaries (per-task lines are DEBUG).
    - `listen`: on PostgreSQL, LISTEN for ready tasks and cancellations (see `listener.py`)
      over the database's own settings, or over `listen_dsn` (a session, not a
      transaction-mode pooler); polling goes on as a fallback.
    """

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
        batch_size: int = 100,
        batch_wait: float = 0.002,
        summary_interval: float = 60.0,
        listen: bool = True,
        listen_dsn: str | None = None,
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
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
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
        self.batch_size = batch_size
        self.batch_wait = batch_wait
        self.summary_interval = summary_interval
        self.listen = listen
        self.listen_dsn = listen_dsn
        self.listener: Listener | None = None
        """The LISTEN connection's thread, on PostgreSQL (None elsewhere or if not `listen`)."""
        self.worker: Worker | None = None
        self.leased = 0
        self.abandoned: list[str] = []
        """The rns whose handlers were still running when the grace period ended."""
        self.stopping = threading.Event()
        self._done = threading.Event()
        self._give_up = threading.Event()  # the grace period is over: stop retrying writes
        self._wake = threading.Event()  # lease now: a slot was freed, or tasks became ready
        self._beat_now = threading.Event()  # heartbeat now: a task of ours may be cancelled
        self._lock = threading.Lock()
        self._lease_lock = threading.Lock()  # a heartbeat pass and a yield never overlap
        self._in_flight: dict[int, TaskContext] = {}  # leased, outcome not written yet
        # Slots a lease in progress will fill: counted as taken, so that the lease loop and a
        # handler thread leasing at the same time never hold more than `concurrency` tasks.
        self._claimed = 0
        self._continuing = False  # whether a handler thread may lease its next task itself
        self._own = threading.local()  # a handler thread's connection for the worker's writes
        self._jobs: queue.SimpleQueue[TaskContext | None] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None  # runs `async def` handlers
        self._outcomes: list[tuple[TaskContext, Outcome]] = []
        self._outcomes_ready = threading.Condition(threading.Lock())
        self._counts = {"completed": 0, "aborted": 0, "stopped": 0, "not written": 0}

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.worker.name if self.worker else "worker-?"

    def stop(self) -> None:
        """Ask `run()` to shut down gracefully (safe from a signal handler)."""
        self.stopping.set()
        self._wake.set()

    def wake(self) -> None:
        """Lease at once (tasks became ready), if there are free slots."""
        self._wake.set()

    def check_leases(self) -> None:
        """Heartbeat at once, e.g. because a task of this worker may have been cancelled."""
        self._beat_now.set()

    def run(self, *, once: bool = False) -> None:
        """Register, work until stopped (or after one batch with `once`), shut down gracefully.

        With `once`, lease at most one batch (up to `concurrency` tasks), finish it and return.
        After a shutdown, `abandoned` names the handlers still running after the grace period.
        """
        self.worker = self._retry(self._register, "register the worker")
        if self.worker is None:
            return
        self._continuing = not once
        logger.info(
            "%s started: queues %s, concurrency %d, lease %gs, heartbeat every %gs",
            self.name,
            ",".join(self.queues),
            self.concurrency,
            self.lease_timeout.total_seconds(),
            self.heartbeat_interval,
        )
        threads = [
            self._thread(self._heartbeat_loop, "scylla-heartbeat"),
            self._thread(self._writer_loop, "scylla-writer"),
        ]
        for number in range(self.concurrency):
            self._thread(self._handler_loop, f"scylla-task-{number}")
        if any(inspect.iscoroutinefunction(self.registry.get(q)) for q in self.queues):
            self._loop = asyncio.new_event_loop()
            self._thread(self._loop.run_forever, "scylla-async")
        if self.listen and connections[self.using].vendor == "postgresql":
            self.listener = Listener(
                on_ready=self._on_ready,
                on_stop=self._on_stop,
                on_connect=self._on_listening,
                using=self.using,
                dsn=self.listen_dsn,
                name=f"scylla_django {self.name}",
            )
            self.listener.start()
        try:
            self._lease_loop(once)
            self._wait(self.stopping.is_set)  # finish the tasks in hand
        finally:
            if self.listener is not None:
                self.listener.close()
            self._shutdown()
            self._done.set()
            self._beat_now.set()
            with self._outcomes_ready:
                self._outcomes_ready.notify_all()
            for thread in threads:
                thread.join(timeout=5)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
            if not connections[self.using].in_atomic_block:
                connections[self.using].close()  # this thread's; others closed their own

    def _thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    def _on_ready(self, queue: str) -> None:
        if queue in self.queues:
            self._wake.set()

    def _on_stop(self, worker: str) -> None:
        if worker == self.name:
            self._beat_now.set()  # the heartbeat's refusal tells which task, and stops it

    def _on_listening(self) -> None:
        # Whatever was notified while the LISTEN was down: lease and heartbeat now.
        self._wake.set()
        self._beat_now.set()

    def _register(self) -> Worker:
        return Worker.objects.db_manager(self.using).register(
            self.queues,
            self.concurrency,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            heartbeat_interval=self.heartbeat_interval,
            lease_timeout=self.lease_timeout,
        )

    def _lease_loop(self, once: bool) -> None:
        failures = 0  # database errors in a row
        while not self.stopping.is_set():
            if self.max_tasks is not None and self.leased >= self.max_tasks:
                break
            self._wake.clear()  # before leasing: a wake-up during the lease is not lost
            with self._lock:
                free = self._free()
            if 0 < free < self.concurrency and self.batch_wait > 0:
                # Other handlers are busy and may be about to finish: a moment's wait lets one
                # lease fill several slots instead of one statement per slot.
                self.stopping.wait(self.batch_wait)
            claimed = self._claim()
            if claimed > 0:
                try:
                    started = self._lease(claimed)
                    failures = 0
                except DatabaseError as exc:
                    failures += 1
                    wait = database_retry_delay(failures)
                    logger.warning("%s cannot lease (%s); retrying in %gs", self.name, exc, wait)
                    self._discard_connection()
                    self.stopping.wait(wait)
                    continue
                for ctx in started:
                    self._dispatch(ctx)
                if once:
                    break
                if len(started) == claimed:
                    continue  # there may be more ready tasks: fill the free slots at once
            self._wake.wait(self.poll_interval)

    def _free(self) -> int:
        """Slots neither in hand nor claimed by a lease in progress, within `max_tasks` (the
        caller holds `_lock`)."""
        free = self.concurrency - len(self._in_flight) - self._claimed
        if self.max_tasks is not None:
            free = min(free, self.max_tasks - self.leased - self._claimed)
        return max(0, free)

    def _claim(self, done: Sequence[TaskContext] = (), *, lease: bool = True) -> int:
        """Claim every free slot for a lease (none unless `lease`), after freeing the slots of
        `done` (their outcomes are written with the lease; if none is claimed, `done` stay in
        hand): in one step, so no other lease takes them meanwhile. The caller then calls
        `_lease()` with what this returns, even 0 (or `_take()` with what it leased)."""
        with self._lock:
            for ctx in done:
                self._in_flight.pop(ctx.task.pk, None)
            claimed = self._free() if lease else 0
            if not claimed:  # nothing to pass their slots to: in hand until written
                self._in_flight.update((ctx.task.pk, ctx) for ctx in done)
            self._claimed += claimed
            return claimed

    def _unclaim(self, claimed: int, done: Sequence[TaskContext]) -> None:
        """Undo `_claim(done)`: the outcomes were not written, their tasks are still in hand."""
        with self._lock:
            self._claimed -= claimed
            for ctx in done:
                self._in_flight[ctx.task.pk] = ctx

    def _lease(self, claimed: int) -> list[TaskContext]:
        """Lease up to `claimed` tasks into the slots claimed for them (released whatever
        happens); return their contexts, in hand from now on."""
        tasks: list[Task] = []
        try:
            if claimed:
                db.use_worker_plans(connections[self.using])  # a connection of the worker's own
                tasks = Task.objects.using(self.using).lease(
                    self.worker_model, self.queues, limit=claimed, timeout=self.lease_timeout
                )
        finally:
            started = self._take(claimed, tasks)
        return started

    def _take(self, claimed: int, tasks: Sequence[Task]) -> list[TaskContext]:
        """Put the leased `tasks` in hand and release the `claimed` slots they were leased
        into; return their contexts."""
        with self._lock:
            self._claimed -= claimed
            started = [TaskContext(task, self.worker_model) for task in tasks]
            for ctx in started:
                self._in_flight[ctx.task.pk] = ctx
            self.leased += len(started)
        for ctx in started:
            task = ctx.task
            logger.debug(
                "%s leased %s (queue %s, attempt %d)", self.name, task.rn, task.queue, task.attempts
            )
        return started

    def _is_async(self, ctx: TaskContext) -> bool:
        return self._loop is not None and inspect.iscoroutinefunction(
            self.registry.get(ctx.task.queue)
        )

    def _dispatch(self, ctx: TaskContext) -> None:
        """Hand a leased task to a handler thread, or to the event loop."""
        if self._is_async(ctx):
            assert self._loop is not None
            asyncio.run_coroutine_threadsafe(self._execute_async(ctx), self._loop)
        else:
            self._jobs.put(ctx)

    def _wait(self, give_up: Callable[[], bool]) -> None:
        """Wait until no task is in flight (handlers done, outcomes written) and no lease is in
        progress, or `give_up()`."""
        while self.in_flight_count() and not give_up():
            self._wake.wait(0.05)
            self._wake.clear()

    def _shutdown(self) -> None:
        """Yield what is still in flight, give handlers the grace period, record the stop."""
        with self._lease_lock:
            for ctx in self.in_flight():
                self._yield(ctx)
        deadline = time.monotonic() + self.grace_period
        self._wait(lambda: time.monotonic() >= deadline)
        self._give_up.set()
        with self._lock:
            running = [ctx.task.rn for ctx in self._in_flight.values() if ctx.handler_running]
        self.abandoned = running
        if running:
            logger.warning(
                "%s: %d handler(s) still running after the %gs grace period: %s",
                self.name,
                len(running),
                self.grace_period,
                ", ".join(running),
            )
        for _ in range(self.concurrency):
            self._jobs.put(None)
        try:
            self.worker_model.stop()
        except DatabaseError as exc:
            logger.warning("%s could not record its stop: %s", self.name, exc)
        self._log_summary()
        logger.info("%s stopped after leasing %d task(s)", self.name, self.leased)

    def _yield(self, ctx: TaskContext) -> None:
        """Give the lease back (the caller holds `_lease_lock`, so no heartbeat is in flight)."""
        ctx.yielded = True  # first: a handler returning now still gets its outcome written
        ctx.stop(WorkerStopping(f"{self.name} is stopping", rn=ctx.task.rn))
        try:
            ctx.task.yield_lease(self.worker_model)
            logger.info("%s yielded %s (queue %s)", self.name, ctx.task.rn, ctx.task.queue)
        except (ScyllaError, DatabaseError) as exc:
            logger.warning("%s could not yield %s: %s", self.name, ctx.task.rn, exc)
            if isinstance(exc, DatabaseError):
                self._discard_connection()

    # -- running a task ---------------------------------------------------------------------

    def _handler_loop(self) -> None:
        try:
            ctx = self._jobs.get()
            while ctx is not None:
                try:
                    following = self._execute(ctx)
                except Exception:  # a bug of ours: log it, give the task up, keep the thread
                    logger.exception("%s: running %s failed", self.name, ctx.task.rn)
                    self._release([ctx])
                    following = None
                ctx = following if following is not None else self._jobs.get()
        finally:
            own = getattr(self._own, "connection", None)
            if own is not None:
                own.close()

    @contextmanager
    def _running(self, ctx: TaskContext) -> Iterator[_Run]:
        """Run the handler of `ctx` in the block (`run.result = run.handler(ctx)`, or awaited);
        afterwards `run.outcome` is what it returned or raised, timed.

        Whatever the handler raises is its outcome, never ours: SystemExit, KeyboardInterrupt,
        and asyncio.CancelledError too.
        """
        handler = self.registry.get(ctx.task.queue)
        assert handler is not None, "leased a task of a queue without a handler"
        run = _Run(handler)
        outcome: Outcome | None
        ctx.handler_running = True
        started = time.monotonic()
        try:
            yield run
            outcome = self._returned(ctx, run.result)
        except BaseException as exc:
            outcome = self._raised(ctx, exc)
        finally:
            ctx.handler_running = False
        run.outcome = _timed(outcome, ctx.task, started)

    def _execute(self, ctx: TaskContext) -> TaskContext | None:
        """Run `ctx`'s handler on this thread; return the next task this thread should run,
        if it leased one."""
        with self._running(ctx) as run:
            run.result = run.handler(ctx)
        if any(c.connection is not None for c in connections.all(initialized_only=True)):
            close_old_connections()  # the handler's own queries: as at the end of a request
        outcome = self._kept(ctx, run.outcome)
        if outcome is not None and self._continuing and self._alone(ctx):
            return self._finish_and_continue(ctx, outcome)
        self._handled(ctx, outcome)
        return None

    async def _execute_async(self, ctx: TaskContext) -> None:
        """An `async def` handler, on the event loop thread: many run at once there."""
        with self._running(ctx) as run:
            run.result = await run.handler(ctx)
        try:
            self._handled(ctx, self._kept(ctx, run.outcome))
        except Exception:  # a bug of ours: log it, give the task up
            logger.exception("%s: running %s failed", self.name, ctx.task.rn)
            self._release([ctx])

    def _returned(self, ctx: TaskContext, result: Any) -> Outcome:
        task = ctx.task
        try:
            return Outcome(task.pk, task.attempts, validate_json(result, "result", allow_null=True))
        except ValidationError as exc:  # a result that is not JSON, or too large
            logger.warning("%s: the result of %s was rejected: %s", self.name, task.rn, exc)
            error = error_record("invalid_result", str(exc)[:500])
            return Outcome(task.pk, task.attempts, errors=[error])

    def _raised(self, ctx: TaskContext, exc: BaseException) -> Outcome | None:
        task = ctx.task
        if isinstance(exc, TaskCancelled | LeaseLost | WorkerStopping):
            logger.info("%s stopped %s: %s", self.name, task.rn, exc)
            return None
        if isinstance(exc, Abort):
            return Outcome(task.pk, task.attempts, errors=[exc.as_error()])
        logger.warning("%s: handler of %s raised %r", self.name, task.rn, exc)
        return Outcome(task.pk, task.attempts, errors=[exception_error(exc)])

    def _kept(self, ctx: TaskContext, outcome: Outcome | None) -> Outcome | None:
        """The outcome to write: none for a task stopped while its handler ran."""
        if outcome is not None and ctx.stopped and not ctx.yielded:
            logger.info("%s: %s was stopped; its outcome is not written", self.name, ctx.task.rn)
            return None
        return outcome

    def _alone(self, ctx: TaskContext) -> bool:
        """Whether `ctx` is the only task in hand and no outcome waits: nothing could join a
        batch of its outcome."""
        with self._lock:
            if len(self._in_flight) != 1 or self._claimed:
                return False
        with self._outcomes_ready:
            return not self._outcomes

    def _handled(self, ctx: TaskContext, outcome: Outcome | None) -> None:
        """Free the handler's slot and queue its outcome for the writer (or drop the task)."""
        if outcome is None:
            self._count("stopped")
            self._release([ctx])
            return
        # The slot stays taken until the outcome is written: a task is the worker's until then.
        with self._outcomes_ready:
            self._outcomes.append((ctx, outcome))
            # The first wakes the writer; a full batch, or the last task in hand, flushes.
            if len(self._outcomes) in (1, self.batch_size) or self._all_handled():
                self._outcomes_ready.notify()

    def _release(self, done: Sequence[TaskContext]) -> None:
        with self._lock:
            for ctx in done:
                self._in_flight.pop(ctx.task.pk, None)
        self._wake.set()

    def _finish_and_continue(self, ctx: TaskContext, outcome: Outcome) -> TaskContext | None:
        """Write `ctx`'s outcome on this thread and lease into the slot it frees (and any other
        free slot); return the leased task this thread runs next, the others handed out.

        On PostgreSQL both are one statement (`finish_and_lease`), one commit; elsewhere the
        outcome is committed first. Either way the database never sees this worker hold more
        than `concurrency` running tasks. A database error leaves the outcome to the writer,
        which retries it, and the lease to the lease loop.
        """
        batch = [(ctx, outcome)]
        # The finished task's slot passes straight to the lease: no other lease can take it.
        claimed = self._claim([ctx], lease=not self.stopping.is_set())
        with self._own_connection():
            if not claimed:
                try:
                    self._report(batch, self._finish(batch))
                except (DatabaseError, ScyllaError) as exc:
                    self._not_written(exc, batch)
                    self._handled(ctx, outcome)  # still in hand: the writer retries it
                else:
                    self._release([ctx])
                return None
            started = self._finish_and_refill(batch, claimed)
        if started is None:  # still in hand: the writer retries it
            self._handled(ctx, outcome)
            return None
        mine = next((new for new in started if not self._is_async(new)), None)
        for new in started:
            if new is not mine:
                self._dispatch(new)
        return mine

    def _finish_and_refill(
        self, batch: list[tuple[TaskContext, Outcome]], claimed: int
    ) -> list[TaskContext] | None:
        """Write `batch`'s outcomes and lease into the `claimed` slots (see `_claim`), in one
        statement on PostgreSQL; return the leased tasks' contexts, in hand, for the caller to
        run or hand out. None if nothing was written: the claim is undone, the batch in hand."""
        try:
            errors, tasks = self._finish_and_lease(batch, claimed)
        except (DatabaseError, ScyllaError) as exc:
            self._not_written(exc, batch)
            self._unclaim(claimed, [ctx for ctx, _ in batch])
            return None
        self._report(batch, errors)
        started = self._take(claimed, tasks)
        if len(started) < claimed or self.stopping.is_set():
            self._wake.set()  # a task that became ready meanwhile is the lease loop's
        if started and self.stopping.is_set():
            # The stop came while leasing: give these back rather than start them.
            with self._lease_lock:
                for new in started:
                    if not new.yielded:
                        self._yield(new)
            self._release(started)
            return []
        return started

    @contextmanager
    def _own_connection(self) -> Iterator[None]:
        """Run the block on this thread's own connection for the worker's writes, kept open
        between tasks, apart from the one the handler's queries use (which Django closes at
        the end of each task, as at the end of a request, under `CONN_MAX_AGE = 0`)."""
        own = getattr(self._own, "connection", None)
        if own is None:
            own = self._own.connection = connections.create_connection(self.using)
        handlers = connections[self.using]
        connections[self.using] = own
        try:
            yield
        finally:
            connections[self.using] = handlers

    # -- writing outcomes -------------------------------------------------------------------

    def _writer_loop(self) -> None:
        try:
            while True:
                with self._outcomes_ready:
                    while not self._outcomes and not self._done.is_set():
                        self._outcomes_ready.wait()
                    if not self._outcomes:
                        return
                    # Let the batch fill up for `batch_wait`, unless it is full or no handler
                    # is still running (nothing more can come until this batch is written).
                    deadline = time.monotonic() + self.batch_wait
                    while (
                        len(self._outcomes) < self.batch_size
                        and not self._all_handled()
                        and not self._done.is_set()
                    ):
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._outcomes_ready.wait(left)
                    batch = self._outcomes[: self.batch_size]
                    del self._outcomes[: self.batch_size]
                self._write(batch)
        finally:
            connections.close_all()

    def _all_handled(self) -> bool:
        """Whether every task in hand has its outcome waiting to be written (caller holds
        `_outcomes_ready`)."""
        return len(self._outcomes) >= len(self._in_flight)

    def _write(self, batch: list[tuple[TaskContext, Outcome]]) -> None:
        """Write a batch of outcomes, leasing into the slots they free (`_write_and_lease`), or
        alone, retrying through database errors until the grace period ends."""
        if self._continuing and self._write_and_lease(batch):
            return
        failures = 0
        while True:
            try:
                errors = self._finish(batch)
                break
            except DatabaseError as exc:
                failures += 1
                self._discard_connection()
                if self._give_up.is_set():
                    for ctx, _ in batch:
                        logger.error(
                            "%s gave up the outcome of %s after %d failed writes (%s); the "
                            "task will run again once its lease expires",
                            self.name,
                            ctx.task.rn,
                            failures,
                            exc,
                        )
                    self._count("not written", len(batch))
                    self._release([ctx for ctx, _ in batch])
                    return
                wait = database_retry_delay(failures)
                logger.warning(
                    "%s could not write %d outcome(s) (%s); retrying in %gs",
                    self.name,
                    len(batch),
                    exc,
                    wait,
                )
                self._give_up.wait(wait)
        self._report(batch, errors)
        self._release([ctx for ctx, _ in batch])

    def _write_and_lease(self, batch: list[tuple[TaskContext, Outcome]]) -> bool:
        """Write `batch` and lease into the slots it frees, handing the leased tasks out; False
        if nothing was (no free slot, a database error): the batch is in hand, to write alone."""
        claimed = self._claim([ctx for ctx, _ in batch], lease=not self.stopping.is_set())
        started = self._finish_and_refill(batch, claimed) if claimed else None
        if started is None:
            return False
        for ctx in started:
            self._dispatch(ctx)
        return True

    def _not_written(self, exc: Exception, batch: list[tuple[TaskContext, Outcome]]) -> None:
        """Log a write of `batch` that failed (retried later), dropping a lost connection."""
        logger.warning(
            "%s could not write %d outcome(s) (%s); retrying", self.name, len(batch), exc
        )
        if isinstance(exc, DatabaseError):
            self._discard_connection()

    def _finish(self, batch: list[tuple[TaskContext, Outcome]]) -> dict[int, ScyllaError]:
        """Write `batch`'s outcomes; return why each one not written was refused, by pk."""
        db.use_worker_plans(connections[self.using])  # a connection of the worker's own
        written = Task.objects.using(self.using).finish_many(
            self.worker_model, [outcome for _, outcome in batch]
        )
        return self._refusals(batch, written)

    def _finish_and_lease(
        self, batch: list[tuple[TaskContext, Outcome]], claimed: int
    ) -> tuple[dict[int, ScyllaError], list[Task]]:
        """Write `batch`'s outcomes and lease up to `claimed` tasks: why each outcome not
        written was refused, by pk, and the tasks leased."""
        db.use_worker_plans(connections[self.using])  # a connection of the worker's own
        written, tasks = Task.objects.using(self.using).finish_and_lease(
            self.worker_model,
            [outcome for _, outcome in batch],
            self.queues,
            limit=claimed,
            timeout=self.lease_timeout,
        )
        try:
            return self._refusals(batch, written), tasks
        except DatabaseError as exc:  # the tasks are leased: keep them, whatever the reason
            self._discard_connection()
            unknown = ScyllaError(f"it was refused, and reading why failed: {exc}")
            return {o.pk: unknown for _, o in batch if o.pk not in written}, tasks

    def _refusals(
        self, batch: list[tuple[TaskContext, Outcome]], written: set[int]
    ) -> dict[int, ScyllaError]:
        refused = {
            outcome.pk: outcome.attempts for _, outcome in batch if outcome.pk not in written
        }
        return (
            Task.objects.using(self.using).refusals(self.worker_model, refused) if refused else {}
        )

    def _report(
        self, batch: list[tuple[TaskContext, Outcome]], errors: dict[int, ScyllaError]
    ) -> None:
        """Count and log the outcomes of `batch` once written (`errors`: those refused)."""
        for ctx, outcome in batch:
            task = ctx.task
            error = errors.get(outcome.pk)
            if error is None:
                done = "completed" if outcome.errors is None else "aborted"
                self._count(done)
                logger.debug("%s %s %s (queue %s)", self.name, done, task.rn, task.queue)
            elif type(error) is InvalidTransition:
                self._count("completed" if outcome.errors is None else "aborted")
                logger.debug("%s: %s", self.name, error)  # an earlier write of ours committed
            else:
                self._count("not written")
                logger.info("%s could not finish %s: %s", self.name, task.rn, error)

    # -- heartbeats -------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        next_touch = next_summary = time.monotonic()
        try:
            while not self._done.is_set():
                self._beat_now.wait(self.heartbeat_interval)
                self._beat_now.clear()
                if self._done.is_set():
                    return
                self._heartbeat_all()
                now = time.monotonic()
                if now >= next_touch:
                    next_touch = now + self.heartbeat_interval * 0.9
                    try:
                        self.worker_model.touch()
                    except DatabaseError:
                        self._discard_connection()
                if now >= next_summary + self.summary_interval:
                    next_summary = now
                    self._log_summary()
        finally:
            connections.close_all()

    def _heartbeat_all(self) -> None:
        """Extend every live lease in one statement; stop the tasks whose lease was refused."""
        max_failures = scylla_settings.HEARTBEAT_FAILURES
        with self._lease_lock:  # a yield waits for this heartbeat, and is then not undone
            live = [ctx for ctx in self.in_flight() if not ctx.stopped]
            if not live:
                return
            leases = {
                ctx.task.pk: (
                    ctx.task.attempts,
                    None if ctx.progress == ctx.sent_progress else ctx.progress,
                )
                for ctx in live
            }
            try:
                db.use_worker_plans(connections[self.using])  # this thread only heartbeats
                extended = Task.objects.using(self.using).heartbeat_many(
                    self.worker_model, leases, timeout=self.lease_timeout
                )
                refused = {pk: leases[pk][0] for pk in leases if pk not in extended}
                errors = (
                    Task.objects.using(self.using).refusals(self.worker_model, refused)
                    if refused
                    else {}
                )
            except Exception as exc:  # the database, mostly; never let this thread die
                self._discard_connection()
                for ctx in live:
                    ctx.failed_heartbeats += 1
                    if ctx.failed_heartbeats >= max_failures:
                        ctx.stop(
                            LeaseLost(
                                f"{max_failures} heartbeats in a row failed; giving the task up",
                                rn=ctx.task.rn,
                            )
                        )
                logger.warning(
                    "%s: heartbeat of %d task(s) failed (%d/%d): %r",
                    self.name,
                    len(live),
                    max(ctx.failed_heartbeats for ctx in live),
                    max_failures,
                    exc,
                )
                return
        for ctx in live:
            if ctx.task.pk in extended:
                ctx.failed_heartbeats = 0
                sent = leases[ctx.task.pk][1]
                if sent is not None:
                    ctx.sent_progress = sent
                continue
            error = errors[ctx.task.pk]
            if type(error) is InvalidTransition and not ctx.handler_running:
                continue  # its outcome was written since we looked
            # Any other refusal means stop: cancelled, reset, aborted by the monitor, taken over.
            logger.info("%s: %s", self.name, error)
            ctx.stop(error)

    # -- helpers ----------------------------------------------------------------------------

    @property
    def worker_model(self) -> Worker:
        assert self.worker is not None, "the worker is not registered yet"
        return self.worker

    def in_flight(self) -> list[TaskContext]:
        with self._lock:
            return list(self._in_flight.values())

    def in_flight_count(self) -> int:
        """Tasks in hand, and slots a lease in progress may fill."""
        with self._lock:
            return len(self._in_flight) + self._claimed

    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self._counts[what] += n

    def _log_summary(self) -> None:
        with self._lock:
            counts, in_flight = dict(self._counts), len(self._in_flight)
            for key in self._counts:
                self._counts[key] = 0
        if any(counts.values()):
            logger.info(
                "%s: %s; %d in flight",
                self.name,
                ", ".join(f"{n} {what}" for what, n in counts.items() if n),
                in_flight,
            )

    def _discard_connection(self) -> None:
        """Close this thread's connection after an error; the next query opens a new one."""
        connection = connections[self.using]
        if connection.in_atomic_block:
            return
        try:
            connection.close()
        except DatabaseError as exc:
            logger.debug("closing the database connection failed: %s", exc)

    def _retry(self, action: Callable[[], Worker], what: str) -> Worker | None:
        failures = 0
        while not self.stopping.is_set():
            try:
                return action()
            except DatabaseError as exc:
                failures += 1
                wait = database_retry_delay(failures)
                logger.warning("cannot %s (%s); retrying in %gs", what, exc, wait)
                self._discard_connection()
                self.stopping.wait(wait)
        return None


@dataclasses.dataclass
class _Run:
    """A handler's run in `TaskWorker._running()`."""

    handler: Callable[[TaskContext], Any]
    result: Any = None
    outcome: Outcome | None = None


def _timed(outcome: Outcome | None, task: Task, started: float) -> Outcome | None:
    """`outcome` with the seconds since `started` (the handler's run time) and its task."""
    if outcome is None:
        return None
    return dataclasses.replace(outcome, duration=time.monotonic() - started, task=task)
