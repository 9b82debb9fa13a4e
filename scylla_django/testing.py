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

`run_task()` and `drain()` run the real lease, heartbeat-free, on the test's thread, and write
outcomes as a worker writes them (retry policies, follow-ups and unique keys included).
`SCYLLA["EAGER"] = True` runs each task's handler as soon as its submission commits, in the
submitting process (see `scylla_django.eager`). `virtual_clock()` (the `scylla_clock` pytest
fixture) moves the database clock ahead: leases expire, backoffs end, schedules come due.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from .db.virtual_clock import VirtualClock
from .followups import release_followups
from .handlers import HandlerRegistry
from .handlers import registry as default_registry
from .models import Task
from .worker.foreground import ForegroundRun
from .worker.foreground import run_task as run_in_foreground

__all__ = ["VirtualClock", "drain", "run_task", "virtual_clock"]


def run_task(
    rn: str, *, using: str = "default", registry: HandlerRegistry = default_registry
) -> Task:
    """Lease the ready task `rn`, run its handler here, write its outcome; return the task as
    it was left (completed, aborted, or ready again if a retry was submitted for it).

    Raises TaskNotFound, InvalidTransition (not ready, or waiting for its parents) or NoHandler.
    What the handler raises is its task's outcome, as under a worker: it is not re-raised.
    """
    run: ForegroundRun = run_in_foreground(rn, using=using, registry=registry, heartbeat=False)
    return run.task


def drain(
    queues: Sequence[str] | None = None,
    *,
    using: str = "default",
    registry: HandlerRegistry = default_registry,
    max_tasks: int = 1000,
) -> list[Task]:
    """Run the ready tasks of `queues` (default: every queue with a handler here), highest
    priority and oldest first, until none is left, tasks their handlers submit included, and
    follow-ups once their parents completed; return them as they were left, in run order.

    A task whose `not_before` is ahead (a retry's backoff, say) is not waited for. Raises
    RuntimeError after `max_tasks` tasks (a handler that submits for ever).
    """
    chosen = list(queues) if queues is not None else registry.queues()
    done: list[Task] = []
    while True:
        release_followups(using)
        rn = (
            Task.objects.using(using)
            .ready(chosen)
            .order_by("-priority", "created", "id")
            .values_list("rn", flat=True)
            .first()
        )
        if rn is None:
            return done
        if len(done) >= max_tasks:
            raise RuntimeError(f"drain() ran {max_tasks} tasks and more are ready")
        done.append(run_task(rn, using=using, registry=registry))


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
