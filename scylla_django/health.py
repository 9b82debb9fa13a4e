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
- `horizon`, `idle_in_transaction`, `tables` (asked for with `vacuum`, PostgreSQL; "not
  applicable" elsewhere): what holds VACUUM back from the queue tables' dead rows, named
  (session, application_name, state, how long its transaction is open); the sessions idle in
  a transaction; the tables' dead-row ratio, sizes and estimated bloat. Each warns past
  `HORIZON_WARNING` (or `DEAD_RATIO_WARNING`); `horizon` fails only past a `max_horizon_age`
  asked for, since a liveness probe should not restart workers for another client's report.

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
from django.template.defaultfilters import filesizeformat

from . import db
from .durations import short
from .enums import Liveness
from .models import Monitor, Task, Worker, queue_tables
from .models.serving import live_worker_queues
from .text import plural

HORIZON_WARNING = timedelta(minutes=1)
"""A transaction open longer, holding VACUUM back, or a session idle in one, is a warning."""

DEAD_RATIO_WARNING = 0.2
"""A queue table with a larger share of dead rows (past `DEAD_ROWS_WARNING` of them) is a
warning: autovacuum's default threshold is 20 % of a table, so past it VACUUM is held back or
cannot keep up."""

DEAD_ROWS_WARNING = 10_000

TABLES_SHOWN = 3
"""The tables a `tables` check names (those with the most dead rows)."""

VACUUM_CHECKS = ("horizon", "idle_in_transaction", "tables")


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
    vacuum: bool = False,
    max_horizon_age: timedelta | None = None,
) -> list[Check]:
    """Run the database check and the ones asked for, in the order of the module docstring
    (`max_horizon_age` implies `vacuum`)."""
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
    if vacuum or max_horizon_age is not None:
        checks.extend(_vacuum_checks(using, database.ok, max_horizon_age))
    return checks


def _vacuum_checks(using: str, reachable: bool, max_age: timedelta | None) -> list[Check]:
    if not reachable:
        return [
            Check(name, False, "not checked: the database does not answer")
            for name in VACUUM_CHECKS
        ]
    try:
        return check_vacuum(using, max_age)
    except DatabaseError as exc:
        return [Check(name, False, f"database error: {_one_line(exc)}") for name in VACUUM_CHECKS]


def check_vacuum(using: str = "default", max_age: timedelta | None = None) -> list[Check]:
    """`horizon`, `idle_in_transaction` and `tables`, from one `db.vacuum_report()`."""
    report = db.vacuum_report(using, queue_tables())
    if report is None:
        vendor = connections[using].display_name
        return [
            Check(name, True, f"not applicable: {vendor} has no VACUUM horizon to watch")
            for name in VACUUM_CHECKS
        ]
    return [horizon_check(report, max_age), idle_check(report), tables_check(report)]


def horizon_check(report: db.VacuumReport, max_age: timedelta | None = None) -> Check:
    """What holds VACUUM back the longest: a warning past `HORIZON_WARNING` (or `max_age`), a
    failure past `max_age` when one is given."""
    hidden = (
        f"; {plural(report.hidden, 'session')} of other roles hidden (grant pg_read_all_stats)"
        if report.hidden
        else ""
    )
    oldest = report.oldest
    if oldest is None:
        return Check("horizon", True, f"nothing holds VACUUM back{hidden}")
    detail = f"the oldest transaction holding back vacuum is {describe_holder(oldest)}{hidden}"
    limit = max_age if max_age is not None else HORIZON_WARNING
    late = oldest.age is not None and oldest.age > limit
    if late and max_age is not None:
        return Check("horizon", False, f"{detail}, longer than {short(max_age)}")
    return Check("horizon", True, detail, warning=late)


def describe_holder(holder: db.HorizonHolder) -> str:
    """ "session 4242 (analytics, idle in transaction) of postgres, open 5 min 3 s, 1,234
    transactions behind"."""
    parts = [holder.label + (f" of {holder.user}" if holder.user else "")]
    if holder.age is not None:
        parts.append(f"open {short(max(holder.age, timedelta(0)))}")
    parts.append(f"{holder.transactions:,} transactions behind")
    return ", ".join(parts)


def idle_check(report: db.VacuumReport) -> Check:
    """The sessions idle in a transaction, longest first: a warning when one has been idle
    longer than `HORIZON_WARNING`."""
    if not report.idle:
        return Check("idle_in_transaction", True, "no session is idle in a transaction")
    named = "; ".join(
        f"session {s.pid} ({s.name or 'no application_name'}) of {s.user}, idle "
        f"{short(max(s.idle, timedelta(0)))}" + (", holding back vacuum" if s.holds_horizon else "")
        for s in report.idle[:5]
    )
    more = f" and {report.idle_count - 5} more" if report.idle_count > 5 else ""
    late = any(s.idle > HORIZON_WARNING for s in report.idle)
    head = plural(report.idle_count, "session")
    return Check(
        "idle_in_transaction", True, f"{head} idle in a transaction: {named}{more}", warning=late
    )


def tables_check(report: db.VacuumReport) -> Check:
    """The queue tables with the most dead rows: their share of dead rows, sizes and estimated
    bloat; a warning past `DEAD_RATIO_WARNING`, or when autovacuum is off (for the server or
    for one of the tables)."""
    shown = [t for t in report.tables if t.live or t.dead][:TABLES_SHOWN]
    described = "; ".join(describe_table(table) for table in shown) or "the tables are empty"
    if not report.autovacuum:
        described = f"autovacuum is off on the server: nothing reclaims dead rows; {described}"
    elif report.unvacuumed:
        off = ", ".join(report.unvacuumed)
        described = f"autovacuum is off for {off}: nothing reclaims their dead rows; {described}"
    late = bool(report.unvacuumed) or any(
        t.dead_ratio > DEAD_RATIO_WARNING and t.dead > DEAD_ROWS_WARNING for t in report.tables
    )
    return Check("tables", True, described, warning=late)


def describe_table(table: db.TableVacuum) -> str:
    """ "scylla_task 12% dead (1,200 of 10,000 rows), 2.1 MB + 1.3 MB of indexes, ~40% bloat"."""
    rows = table.live + table.dead
    text = (
        f"{table.table} {table.dead_ratio:.0%} dead ({table.dead:,} of {rows:,} rows), "
        f"{_size(table.size)} + {_size(table.index_size)} of indexes"
    )
    if table.bloat_ratio is not None:
        text += f", ~{table.bloat_ratio:.0%} bloat"
    return text


def _size(value: int) -> str:
    return str(filesizeformat(value)).replace("\xa0", " ")


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
