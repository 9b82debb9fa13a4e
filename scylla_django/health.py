"""Health checks for probes: `manage.py scylla_health` and the API's `GET /health/` run these.

- `database`: a query answers.
- `worker` (asked for with a host name): a worker registered from that host is alive, i.e. it
  was seen within two of its heartbeat intervals (by the database clock).
- `monitor`: some monitor made a pass within three of its intervals, so expired leases are
  being reset.
- `lag` (asked for with a maximum): no queue's oldest leasable ready task has waited longer.
- `served` (asked for): every queue with leasable tasks has a live (alive or silent) worker
  leasing from it. A queue that none serves (a typo in a queue name, say) is a warning, not a
  failure: the scheduler itself is healthy.

Each check is one small query; when the database does not answer, the others are reported as
failed without being run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta

from django.db import Error as DatabaseError
from django.db import connections

from . import db
from .durations import short
from .enums import Liveness
from .models import Monitor, Task, Worker
from .models.serving import live_worker_queues
from .text import plural


@dataclass(frozen=True)
class Check:
    """The outcome of one check: its name, whether it passed, and why, in words.

    A `warning` passed (`ok`) but found something a person should look at.
    """

    name: str
    ok: bool
    detail: str
    warning: bool = False


def run_checks(
    using: str = "default",
    *,
    worker_host: str | None = None,
    monitor: bool = False,
    max_lag: timedelta | None = None,
    queues: Sequence[str] = (),
    served: bool = False,
) -> list[Check]:
    """Run the database check and the ones asked for, in the order of the module docstring."""
    database = check_database(using)
    checks = [database]
    wanted: list[tuple[str, Callable[[], Check]]] = []
    if worker_host is not None:
        wanted.append(("worker", lambda: check_worker(using, worker_host)))
    if monitor:
        wanted.append(("monitor", lambda: check_monitor(using)))
    if max_lag is not None:
        wanted.append(("lag", lambda: check_lag(using, max_lag, queues)))
    if served:
        wanted.append(("served", lambda: check_served(using)))
    for name, run in wanted:
        if not database.ok:
            checks.append(Check(name, False, "not checked: the database does not answer"))
            continue
        try:
            checks.append(run())
        except DatabaseError as exc:
            checks.append(Check(name, False, f"database error: {_one_line(exc)}"))
    return checks


def check_database(using: str = "default") -> Check:
    """The database answers a query."""
    try:
        db.ping(using)
    except DatabaseError as exc:
        with suppress(DatabaseError):  # a probe process may ask again: start afresh
            connections[using].close()
        return Check("database", False, f"unreachable: {_one_line(exc)}")
    return Check("database", True, "reachable")


def check_worker(using: str, hostname: str) -> Check:
    """A worker registered from `hostname` is alive (seen within two heartbeat intervals)."""
    workers = Worker.objects.using(using).filter(hostname=hostname)
    alive = list(workers.in_state(Liveness.ALIVE).order_by("-id")[:5])
    if alive:
        names = ", ".join(w.name for w in alive)
        return Check("worker", True, f"alive on {hostname}: {names}")
    latest = workers.order_by("-id").first()
    if latest is None:
        return Check("worker", False, f"no worker has registered from {hostname}")
    return Check(
        "worker",
        False,
        f"no worker on {hostname} is heartbeating; the latest, {latest.name}, is "
        f"{latest.current_state()}",
    )


def check_monitor(using: str = "default") -> Check:
    """Some monitor made a pass within three of its intervals."""
    status = Monitor.objects.using(using).status()
    if status.last_pass_age is None:
        last = "no monitor has ever made a pass"
    else:
        last = f"the last pass ended {short(max(status.last_pass_age, timedelta(0)))} ago"
    if status.missing:
        return Check(
            "monitor", False, f"no monitor is running: expired leases are not reset ({last})"
        )
    return Check("monitor", True, last)


def check_lag(using: str, max_lag: timedelta, queues: Sequence[str] = ()) -> Check:
    """No queue (of `queues`, or any) has a leasable ready task older than `max_lag`."""
    tasks = Task.objects.using(using)
    if queues:
        tasks = tasks.filter(queue__in=list(queues))
    ages = {queue: age for queue, (_, age) in tasks.ready_summary().items() if age is not None}
    late = sorted(((age, queue) for queue, age in ages.items() if age > max_lag), reverse=True)
    limit = short(max_lag)
    if late:
        described = ", ".join(f"{queue} ({short(age)})" for age, queue in late[:5])
        return Check("lag", False, f"ready tasks waiting longer than {limit}: {described}")
    if not ages:
        return Check("lag", True, "no ready task is waiting")
    worst_age, worst_queue = max((age, queue) for queue, age in ages.items())
    return Check(
        "lag",
        True,
        f"the longest wait is {short(max(worst_age, timedelta(0)))} ({worst_queue}), under {limit}",
    )


def check_served(using: str = "default") -> Check:
    """Every queue with leasable tasks has a live worker; a warning (still ok) when one has not."""
    waiting = {
        queue: count
        for queue, (count, waited) in Task.objects.using(using).ready_summary().items()
        if waited is not None  # None: every ready task of the queue waits for its not_before
    }
    if not waiting:
        return Check("served", True, "no ready task is waiting")
    live = live_worker_queues(using, max_age=0)
    unserved = sorted(queue for queue in waiting if queue not in live)
    if not unserved:
        return Check("served", True, "every queue with ready tasks has a live worker")
    described = ", ".join(
        f"{queue} ({plural(waiting[queue], 'ready task')})" for queue in unserved[:5]
    )
    more = f" and {len(unserved) - 5} more" if len(unserved) > 5 else ""
    return Check("served", True, f"no live worker serves {described}{more}", warning=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__
