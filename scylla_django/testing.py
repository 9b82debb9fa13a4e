"""Helpers for a project's own tests: run its handlers without a worker process.

```python
from scylla_django.testing import drain, run_task

def test_report_is_built(transactional_db):
    task = Task.objects.submit("reports", {"day": "2026-11-25"})
    assert run_task(task.rn).status == "completed"

def test_everything_submitted_runs(transactional_db):
    place_order()          # submits tasks, whose handlers submit more
    drain(["emails", "invoices"])
```

`run_task()` and `drain()` run the real lease, heartbeat-free, on the test's thread, through the
worker's own code from the handler's call to the outcome (`worker.foreground`): snoozes,
`ctx.spawn()` and `ctx.batch()` children, bundle handlers, run-time limits and task logs as under
`scylla_worker`; outcomes are written as a worker writes them (retry policies, follow-ups and
unique keys included).
`SCYLLA["EAGER"] = True` runs each task's handler as soon as its submission commits, in the
submitting process (see `scylla_django.eager`). `virtual_clock()` (the `scylla_clock` pytest
fixture) moves the database clock ahead: leases expire, backoffs end, schedules come due.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from .batches import release_callbacks
from .db.virtual_clock import VirtualClock
from .followups import release_followups
from .handlers import HandlerRegistry
from .handlers import registry as default_registry
from .models import Task
from .worker.foreground import run_tasks

__all__ = ["VirtualClock", "drain", "run_task", "virtual_clock"]


def run_task(
    rn: str, *, using: str = "default", registry: HandlerRegistry = default_registry
) -> Task:
    """Lease the ready task `rn`, run its handler here, write its outcome; return the task as
    it was left (completed, aborted, or ready again if it snoozed). A bundle handler gets a
    bundle of one.

    Raises TaskNotFound, InvalidTransition (not ready, or waiting for its parents) or NoHandler.
    What the handler raises is its task's outcome, as under a worker: it is not re-raised.
    """
    [run] = run_tasks([rn], using=using, registry=registry, heartbeat=False)
    return run.task


def drain(
    queues: Sequence[str] | None = None,
    *,
    using: str = "default",
    registry: HandlerRegistry = default_registry,
    max_tasks: int = 1000,
) -> list[Task]:
    """Run the ready tasks of `queues` (default: every queue with a handler here), highest
    priority and oldest first, until none is left: the tasks their handlers submit included
    (`Task.objects.submit()`, `ctx.spawn()`, `ctx.batch()`), follow-ups once their parents
    completed and a batch's callbacks once it finished (released as the monitor releases
    them); return them as they were left, in run order. A bundle handler's queue
    is run a bundle at a time: the next task and the ready tasks of its queue after it, up to
    its `bundle_size`, in one call.

    A task whose `not_before` is ahead (a retry's backoff, a snooze) is not waited for. Raises
    RuntimeError after `max_tasks` tasks (a handler that submits for ever).
    """
    chosen = list(queues) if queues is not None else registry.queues()
    done: list[Task] = []
    while True:
        release_followups(using)
        release_callbacks(using)
        ready = Task.objects.using(using).ready(chosen).order_by("-priority", "created", "id")
        first = ready.values_list("rn", "queue").first()
        if first is None:
            return done
        if len(done) >= max_tasks:
            raise RuntimeError(f"drain() ran {max_tasks} tasks and more are ready")
        rn, queue = first
        rns = [rn]
        bundling = registry.bundling_of(queue)
        if bundling is not None:
            size = min(bundling.size, max_tasks - len(done))
            rns = list(ready.filter(queue=queue).values_list("rn", flat=True)[:size])
        runs = run_tasks(rns, using=using, registry=registry, heartbeat=False)
        done.extend(run.task for run in runs)


@contextmanager
def virtual_clock(using: str = "default") -> Iterator[VirtualClock]:
    """Shift the database clock of `using` in the block: `clock.advance(timedelta(minutes=10))`
    and the real lease, monitor, retry and schedule code sees ten minutes pass (PostgreSQL and
    SQLite; see `scylla_django.db.virtual_clock`). Needs a transactional test: the test's
    connection is made again on entry and on exit. The `scylla_clock` fixture of
    `scylla_django.pytest_plugin` is this block around a test."""
    clock = VirtualClock(using)
    clock.install()
    try:
        yield clock
    finally:
        clock.uninstall()
