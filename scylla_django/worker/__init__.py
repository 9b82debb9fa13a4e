"""The worker runtime: lease tasks when there is free capacity, run their handlers, heartbeat
them, write their outcomes, many per statement, and shut down gracefully.

`TaskWorker(WorkerOptions(...))` is a plain class; `manage.py scylla_worker` only parses
arguments and calls it. It wires the parts, one concept each:

- `options`: `WorkerOptions`, what the worker is told;
- `slots`: what is in hand, and the free slots a lease may claim;
- `leasing`: the lease loop, on the caller's thread (it runs `run()`);
- `bundling`: a thread per bundle handler's queue, leasing its bundles and writing their
  outcomes;
- `execution`: hands each task to its runner: `handler_threads` for plain handlers (started
  as their tasks come, up to `concurrency`), `handler_loop`, coroutines on one event loop
  thread for `async def` ones (a slot of an `async def` handler costs no thread, so such a
  worker holds any number of tasks), `bundle_call` for the bundlers' bundles; every runner,
  and a task run in the foreground (`foreground`, `foreground_call`: `scylla_run`, the
  testing helpers, the eager mode), makes its outcome in one room (`outcomes`);
- `isolation`: under `isolation="process"`, a child process per handler thread;
- `resources`: what each handler's run uses (CPU time, peak memory), and `max_memory`;
- `writer`: the outcome writer, on a thread of its own or on the handler's thread, coalescing
  outcomes into writes with the lease that refills their slots (`fenced_writes`: the
  statements; `write_retry`: a failed write; `write_reports`: what was written, counted);
- `heartbeat`: a thread that extends the leases in hand, and yields them on shutdown (one
  statement each on PostgreSQL, however many);
- `watchdog`: a thread that stops the tasks past their run-time limit or whose leases may
  lapse (heartbeats failing), and gives up the handlers that run on regardless (a coroutine
  is cancelled); it looks only at the tasks due;
- `summary`: the counts of the INFO summary lines;
- `database`: retries through an outage and the handler threads' own connections;
- `hooks`: `WorkerHooks`, what the worker did, counted (leased, started, written, beat,
  yielded, given up), which tests wait on instead of sleeping;
- on PostgreSQL, a listener thread wakes the lease loop when tasks become ready and the
  heartbeat when a task of this worker is cancelled (see `listener.py`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

from django.db import Error as DatabaseError

from .. import db
from ..child import Setup
from ..conf import scylla_settings
from ..handlers import TaskContext
from ..listener import Listener
from ..models import Worker
from ..resources import MB, current_memory
from .bundles import Bundler, bundle_queues, with_bundles
from .daemons import start_daemon
from .database import WorkerConnection, retry
from .execution import Execution
from .heartbeat import Heartbeat
from .hooks import WorkerHooks
from .isolation import Isolation
from .leasing import LeaseLoop
from .load import LoadGate
from .options import WorkerOptions
from .slots import Slots
from .summary import Summary
from .watchdog import Watchdog
from .writer import OutcomeWriter

__all__ = ["TaskContext", "TaskWorker", "WorkerOptions"]

logger = logging.getLogger("scylla_django")


class TaskWorker:
    """Runs the handlers of `options.queues`, at most `options.concurrency` tasks at a time.

    After a shutdown, `abandoned` names the handlers still running after the grace period
    (their tasks were yielded already; handler threads are daemon threads), and `recycled`
    tells whether the worker stopped because of `max_tasks` or `max_memory`.
    """

    def __init__(self, options: WorkerOptions) -> None:
        self.options = options
        self.worker: Worker | None = None
        """The worker's registration, once `run()` has made it."""
        self.listener: Listener | None = None
        """The LISTEN connection's thread, on PostgreSQL (None elsewhere or if not `listen`)."""
        self.abandoned: list[str] = []
        """The rns whose handlers were still running when the grace period ended."""
        self.stopping = threading.Event()
        self._wakeup = threading.Event()  # lease now: a slot was freed, or tasks became ready
        self._grace_over = threading.Event()  # stop retrying writes: the grace period is over
        self.hooks = WorkerHooks()
        """What the worker did, counted: tests wait on `hooks.wait_for("beat", n)`."""
        self._watchdog = Watchdog(options, lambda: self.name, hooks=self.hooks)
        self._slots = Slots(
            options.concurrency,
            options.max_tasks,
            on_free=self.wake,
            on_take=self._watchdog.track,
            prefetch=options.prefetch,
            hooks=self.hooks,
        )
        self._heartbeat: Heartbeat | None = None
        self._connection = WorkerConnection(options.using)
        self._bundlers: list[Bundler] = []
        self._bundles_done = threading.Event()  # the bundlers stop: the worker is stopping

    @property
    def name(self) -> str:
        return self.worker.name if self.worker else "worker-?"

    @property
    def recycled(self) -> bool:
        """Whether the worker stopped leasing at a limit of its own (`max_tasks`,
        `max_memory`) rather than because it was told to stop."""
        return self._slots.exhausted() and not self.stopping.is_set()

    @property
    def leased(self) -> int:
        """Tasks leased since `run()` started."""
        return self._slots.leased()

    def in_flight_count(self) -> int:
        """Tasks in hand, and slots a lease in progress may fill."""
        return self._slots.taken()

    def stop(self) -> None:
        """Ask `run()` to shut down gracefully. From any thread, not from a signal handler
        (management/stops.py says why)."""
        self.stopping.set()
        self._wakeup.set()

    def idle(self) -> bool:
        """Whether the lease loop waits for a wake-up with none pending: it takes a new task
        only when something wakes it (a notification, a freed slot, the next poll). Tests
        wait on it before submitting what only a wake-up should start."""
        if self._wakeup.is_set():
            return False
        return self.hooks.idle()

    def wake(self) -> None:
        """Lease at once (a slot was freed, or tasks became ready), if there are free slots."""
        self._wakeup.set()

    def run(self, *, once: bool = False) -> None:
        """Register, work until stopped (or after one lease with `once`), shut down gracefully.

        With `once`, lease at most once (up to `concurrency` tasks), finish it and return.
        """
        options = self.options
        if once:
            self._slots.stop_prefetching()
        worker = retry(
            self._register, "register the worker", using=options.using, stop=self.stopping
        )
        if worker is None:
            return
        self.worker = worker
        summary = Summary(options.summary_interval)
        isolation = None
        if options.isolation == "process":
            isolation = Isolation(
                Setup.of_this_process(
                    handler
                    for handler in map(options.registry.get, options.queues)
                    if handler is not None
                ),
                max_memory=options.max_memory,
                stop_grace=options.grace_period,
                name=self.name,
            )
        execution = Execution(
            options.registry,
            options.queues,
            options.concurrency,
            options.using,
            lambda: self.name,
            isolation=isolation,
            after_task=self._check_memory if options.max_memory is not None else None,
            hooks=self.hooks,
        )
        load = LoadGate(options, worker, self._connection)
        self._bundlers = [
            Bundler(
                options,
                worker,
                queue,
                execution=execution,
                connection=self._connection,
                watchdog=self._watchdog,
                stopping=self._bundles_done,
                once=once,
                load=load,
                hooks=self.hooks,
            )
            for queue in bundle_queues(options)
        ]
        in_hand = with_bundles(self._slots.in_hand, self._bundlers)
        heartbeat = self._heartbeat = Heartbeat(
            options,
            worker,
            in_hand,
            lambda: summary.log_when_due(self.name, self._slots.held()),
            self._connection,
            watchdog=self._watchdog,
            hooks=self.hooks,
        )
        writer = OutcomeWriter(
            options,
            worker,
            slots=self._slots,
            execution=execution,
            heartbeat=heartbeat,
            summary=summary,
            stopping=self.stopping,
            grace_over=self._grace_over,
            wake=self.wake,
            refill=not once,
            connection=self._connection,
        )
        leasing = LeaseLoop(
            options,
            worker,
            slots=self._slots,
            execution=execution,
            stopping=self.stopping,
            wakeup=self._wakeup,
            connection=self._connection,
            give_back=heartbeat.give_back,
            hooks=self.hooks,
            load=load,
        )
        logger.info(
            "%s started: queues %s, concurrency %d, prefetch %d, lease %gs, heartbeat every %gs%s",
            self.name,
            ",".join(options.queues),
            options.concurrency,
            self._slots.prefetch,
            options.lease_length.total_seconds(),
            options.heartbeat_seconds,
            ", handlers in child processes" if isolation is not None else "",
        )
        threads = [
            start_daemon(heartbeat.run, "scylla-heartbeat"),
            start_daemon(writer.run, "scylla-writer"),
            start_daemon(
                lambda: self._watchdog.run(self._slots.holds, self._slots.held, execution),
                "scylla-watchdog",
            ),
        ]
        execution.start(writer)
        bundle_threads = [
            start_daemon(bundler.run, f"scylla-bundle-{bundler.queue}")
            for bundler in self._bundlers
        ]
        if options.listen and db.driver(options.using).listens:
            self.listener = Listener(
                on_ready=self._on_ready,
                on_stop=self._on_stop,
                on_connect=self._on_listening,
                using=scylla_settings.listen_alias(options.using),
                dsn=options.listen_dsn,
                name=f"scylla_django {self.name}",
            )
            self.listener.start()
        try:
            leasing.run(once=once)
            self._slots.wait_until_empty(self.stopping.is_set)  # finish the tasks in hand
            if once:
                for thread in bundle_threads:
                    thread.join()
        finally:
            if self.listener is not None:
                self.listener.close()
            self._shutdown(worker, heartbeat, writer, execution, summary, bundle_threads)
            heartbeat.close()
            self._watchdog.close()
            writer.close()
            for thread in threads:
                thread.join(timeout=5)
            execution.stop_loop()
            self._connection.close()

    def _shutdown(
        self,
        worker: Worker,
        heartbeat: Heartbeat,
        writer: OutcomeWriter,
        execution: Execution,
        summary: Summary,
        bundle_threads: list[threading.Thread],
    ) -> None:
        """Write the outcomes waiting, yield what is still in hand (running or prefetched,
        bundles too), give handlers the grace period, record the stop."""
        writer.flush(timeout=min(5.0, self.options.grace_period))
        self._bundles_done.set()
        heartbeat.give_back(with_bundles(self._slots.in_hand, self._bundlers)())
        deadline = time.monotonic() + self.options.grace_period
        self._slots.wait_until_empty(lambda: time.monotonic() >= deadline)
        for thread in bundle_threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._grace_over.set()
        running = self._slots.running() + [
            ctx.task.rn
            for b in self._bundlers
            for ctx in b.in_hand()
            if ctx.in_hand.handler_running
        ]
        self.abandoned = running
        if running:
            logger.warning(
                "%s: %d handler(s) still running after the %gs grace period: %s",
                self.name,
                len(running),
                self.options.grace_period,
                ", ".join(running),
            )
        execution.stop()
        try:
            with self._connection.used():
                worker.stop()
        except DatabaseError as exc:
            logger.warning("%s could not record its stop: %s", self.name, exc)
        summary.log(self.name, self._slots.held())
        logger.info("%s stopped after leasing %d task(s)", self.name, self.leased)

    def _check_memory(self) -> None:
        """After a task: past `max_memory`, lease no more, finish the tasks in hand, stop."""
        limit = self.options.max_memory
        memory = current_memory()
        if limit is None or memory is None or memory <= limit * MB:
            return
        if not self._slots.exhausted():
            logger.warning(
                "%s holds %d MB, past the limit of %d MB: it leases no more, finishes its "
                "tasks and stops",
                self.name,
                memory // MB,
                limit,
            )
            self._slots.retire()
        self.wake()

    def _register(self) -> Worker:
        options = self.options
        try:
            with self._connection.used():
                return Worker.objects.db_manager(options.using).register(
                    list(options.queues),
                    options.concurrency,
                    hostname=socket.gethostname(),
                    pid=os.getpid(),
                    heartbeat_interval=options.heartbeat_seconds,
                    lease_length=options.lease_length,
                    max_load=options.max_load,
                )
        except DatabaseError:
            self._connection.discard()
            raise

    def _on_ready(self, queue: str) -> None:
        if queue in self.options.queues:
            self.wake()
        for bundler in self._bundlers:
            if bundler.queue == queue:
                bundler.wake()

    def _on_stop(self, worker: str) -> None:
        if worker == self.name and self._heartbeat is not None:
            self._heartbeat.look_now()  # a read of its leases tells which task, and stops it

    def _on_listening(self) -> None:
        # Whatever was notified while the LISTEN was down: lease and heartbeat now.
        self.wake()
        if self._heartbeat is not None:
            self._heartbeat.beat_now()
