"""Tasks run in the foreground, on the caller's thread: `manage.py scylla_run RN` (a debug
run), `scylla_django.testing.run_task()` and `drain()`, and the eager mode.

The tasks are leased by hand (`TaskQuerySet.lease_rn`) by a worker registered for the run (its
host reads "(scylla_run)") and run on this thread (`ForegroundCall`, `BundleCall`), their
outcomes made in the same room as in a worker's slots and bundlers (`outcomes.py`): snoozes,
`ctx.spawn()` and `ctx.batch()` children, bundle handlers, task logs, what the run used.
A watchdog stops a task at its run-time limit as a worker's does (`ctx.check()` raises
`TaskTimedOut`, and the task is aborted with `timeout`); a handler that runs on regardless is
waited for, since nothing can take the caller's thread's place. `ctx.fenced()` blocks and the
optional heartbeat are fenced on the run's lease. The outcomes are written with `finish_many`
on the caller's connection, as a worker writes them (retry policies, follow-ups and unique keys
included). With `dry_run` all of it happens in one transaction that is rolled back: the
database is left as it was, and the tasks' logs are not stored.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta

from django.db import transaction

from ..exceptions import ScyllaError
from ..handlers import HandlerRegistry, TaskContext
from ..handlers import registry as default_registry
from ..models import Outcome, Task, Worker
from .bundle_call import BundleCall
from .daemons import start_daemon
from .database import WorkerConnection
from .foreground_call import ForegroundCall
from .heartbeat import Heartbeat
from .options import WorkerOptions
from .outcomes import RunOutcomes
from .watchdog import Watchdog

logger = logging.getLogger("scylla_django")

# What the host of a worker registered for one run says besides the host name.
RUN_HOST = "(scylla_run)"


class NoHandler(ScyllaError, code="no_handler"):
    """No handler is registered in this process for the task's queue."""


@dataclasses.dataclass
class ForegroundRun:
    """How a foreground run of one task ended: the task as it was left (`dry_run`: as it would
    have been), its outcome (None if it was stopped: then `stop` says why), and whether the
    outcome was written."""

    task: Task
    outcome: Outcome | None
    written: bool = False
    stop: ScyllaError | None = None


class ForegroundWriter:
    """The `OutcomeSink` of a foreground run: keeps each task's outcome (None: stopped) for
    the run to write once its handler has returned, on the caller's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes: dict[int, Outcome | None] = {}

    def finish_here(self, ctx: TaskContext, outcome: Outcome | None) -> TaskContext | None:
        self.hand_over(ctx, outcome)
        return None

    def hand_over(self, ctx: TaskContext, outcome: Outcome | None) -> None:
        with self._lock:
            self.outcomes[ctx.task.pk] = outcome

    def give_up(self, ctx: TaskContext) -> None:
        self.hand_over(ctx, None)

    def start_needs_writes(self, ctx: TaskContext) -> bool:
        return False  # a task run by hand is leased started (`Task.objects.lease_rn`)

    def write_before_start(self, ctx: TaskContext) -> bool:
        return True

    def holds(self, ctx: TaskContext) -> bool:
        """Whether `ctx` has no outcome yet."""
        with self._lock:
            return ctx.task.pk not in self.outcomes


def run_task(
    rn: str,
    *,
    using: str = "default",
    registry: HandlerRegistry = default_registry,
    dry_run: bool = False,
    heartbeat: bool = True,
    lease_length: timedelta | None = None,
    post_mortem: Callable[[BaseException], None] | None = None,
) -> ForegroundRun:
    """Lease the ready task `rn`, run its handler here and write its outcome (a bundle handler
    gets a bundle of one).

    `post_mortem(exc)` is called with what the handler raised, before its outcome is made (a
    debugger's post-mortem; the run-time limit is then not enforced, since the debugger may
    hold the handler as long as it likes). `heartbeat` keeps the lease alive from a thread
    while the handler runs (not in a `dry_run`, whose lease no other connection can see).

    Raises TaskNotFound, InvalidTransition (the task is not ready, or waits for its parents),
    NoHandler.
    """
    [run] = run_tasks(
        [rn],
        using=using,
        registry=registry,
        dry_run=dry_run,
        heartbeat=heartbeat,
        lease_length=lease_length,
        post_mortem=post_mortem,
    )
    return run


def run_tasks(
    rns: Sequence[str],
    *,
    using: str = "default",
    registry: HandlerRegistry = default_registry,
    dry_run: bool = False,
    heartbeat: bool = True,
    lease_length: timedelta | None = None,
    post_mortem: Callable[[BaseException], None] | None = None,
) -> list[ForegroundRun]:
    """Lease the ready tasks `rns`, all of one queue, and run them here as `run_task()` runs
    one: a bundle handler's in one call (one bundle), a plain handler's one after the other."""
    if not rns:
        return []
    tasks = Task.objects.using(using)
    queue = tasks.get_by_rn(rns[0]).queue
    for rn in rns:
        task = tasks.get_by_rn(rn)
        if registry.get(task.queue) is None:
            raise NoHandler(
                f"No handler is registered for queue {task.queue!r} of task {rn}.", rn=rn
            )
        if task.queue != queue:
            raise ValueError(f"The tasks of one foreground run share a queue: {rn} is not {queue}")
    run = _Run(rns, queue, using, registry, lease_length, post_mortem, dry_run, heartbeat)
    if not dry_run:
        return run.run()
    with transaction.atomic(using=using):
        runs = run.run()
        transaction.set_rollback(True, using=using)
    return runs


class _Run:
    """One foreground run: a worker registered for it leases the tasks, the foreground call (or
    the bundle call) runs them on this thread, the watchdog (and the heartbeat, if any) watch
    them meanwhile."""

    def __init__(
        self,
        rns: Sequence[str],
        queue: str,
        using: str,
        registry: HandlerRegistry,
        lease_length: timedelta | None,
        post_mortem: Callable[[BaseException], None] | None,
        dry_run: bool,
        heartbeat: bool,
    ) -> None:
        self.rns = list(rns)
        self.dry_run = dry_run
        self.heartbeat = heartbeat and not dry_run  # no other connection sees a dry run's lease
        self.using = using
        self.registry = registry
        self.post_mortem = post_mortem
        options = WorkerOptions([queue], registry=registry, using=using, listen=False)
        if lease_length is not None:
            options = dataclasses.replace(options, lease_length=lease_length)
        self.options = options

    def run(self) -> list[ForegroundRun]:
        options = self.options
        worker = Worker.objects.db_manager(self.using).register(
            list(options.queues),
            hostname=f"{socket.gethostname()} {RUN_HOST}"[:255],
            pid=os.getpid(),
            heartbeat_interval=options.heartbeat_seconds,
            lease_length=options.lease_length,
        )
        try:
            contexts = [self._lease(worker, rn) for rn in self.rns]
            writer = ForegroundWriter()
            self._execute(worker, contexts, writer)
            outcomes = [writer.outcomes.get(ctx.task.pk) for ctx in contexts]
            written: set[int] = set()
            done = [outcome for outcome in outcomes if outcome is not None]
            if done:
                written = Task.objects.using(self.using).finish_many(worker, done)
            return [
                ForegroundRun(
                    Task.objects.using(self.using).get(pk=ctx.task.pk),
                    outcome,
                    written=ctx.task.pk in written,
                    stop=ctx.stop_reason if outcome is None else None,
                )
                for ctx, outcome in zip(contexts, outcomes, strict=True)
            ]
        finally:
            worker.stop()

    def _lease(self, worker: Worker, rn: str) -> TaskContext:
        task = Task.objects.using(self.using).lease_rn(
            worker, rn, lease_length=self.options.lease_length
        )
        logger.info("%s leased %s (queue %s)", worker.name, rn, task.queue)
        ctx = TaskContext(task, worker)
        ctx.bundled = self.registry.bundling_of(task.queue) is not None
        return ctx

    def _execute(
        self,
        worker: Worker,
        contexts: list[TaskContext],
        writer: ForegroundWriter,
    ) -> None:
        """Run the handler(s) of `contexts` here, watched meanwhile; their outcomes go to
        `writer`."""
        options = self.options
        outcomes = RunOutcomes(
            self.registry,
            lambda: worker.name,
            post_mortem=self.post_mortem,
            keep_logs=not self.dry_run,  # the storage is not rolled back
        )
        outcomes.send_to(writer)
        call = ForegroundCall(outcomes)
        watchdog = Watchdog(options, lambda: worker.name)
        for ctx in contexts:
            watchdog.track(ctx, limit=self.post_mortem is None, lease=self.heartbeat)

        def in_hand() -> list[TaskContext]:
            return [ctx for ctx in contexts if writer.holds(ctx)]

        def holds(ctx: TaskContext) -> bool:  # a bundle's members: as a bundler's, not given up
            return not ctx.bundled and writer.holds(ctx)

        threads = [
            start_daemon(
                lambda: watchdog.run(holds, lambda: len(in_hand()), call), "scylla-watchdog"
            )
        ]
        beat: Heartbeat | None = None
        connection = WorkerConnection(self.using)
        if self.heartbeat:
            beat = Heartbeat(options, worker, in_hand, lambda: None, connection, watchdog=watchdog)
            threads.append(start_daemon(beat.run, "scylla-heartbeat"))
        try:
            if contexts[0].bundled:
                for ctx, outcome in BundleCall(outcomes, foreground=True).run(contexts):
                    writer.hand_over(ctx, outcome)
                for ctx in contexts:
                    if writer.holds(ctx):
                        writer.give_up(ctx)  # stopped: nothing is written for it
            else:
                for ctx in contexts:
                    call.run(ctx)
        finally:
            watchdog.close()
            if beat is not None:
                beat.close()
            for thread in threads:
                thread.join(10)
            connection.close()
