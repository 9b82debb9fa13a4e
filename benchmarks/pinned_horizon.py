"""The queue under a pinned MVCC horizon: tasks offered at a steady rate to real workers while
something keeps VACUUM from reclaiming the dead rows each transition leaves, beside pgbench.

    PYTHONPATH=. python benchmarks/pinned_horizon.py                    # 2-minute phases
    PYTHONPATH=. python benchmarks/pinned_horizon.py --phase 600 --rate 1000   # the full run

Phases, one after the other, each `--phase` seconds:

- `clean`: nothing holds the horizon;
- `pinned`: one more connection holds an open transaction with a transaction id
  (`BEGIN; SELECT txid_current();`, then idle), as a forgotten shell or a hung request does;
- `after pin`: the transaction ended;
- `readers`: `--readers` connections each in one REPEATABLE READ transaction for the whole
  phase, scanning the task and History tables (`count(*)`) every `--reader-pause` seconds,
  as analytics reports do;
- `after readers`: they ended.

Throughout, a client thread offers `--rate` no-op tasks a second (`submit_many` every 100 ms) to
`--workers` `scylla_worker` processes (`--concurrency 16 --poll-interval 0.1`, the handlers of
benchmarks/throughput_handlers.py), and a probe leases one task every 100 ms with
`Task.objects.lease()` and completes it: the claim latency is that call's, round trip
included, whether it found a task or not (an empty queue's lease walks the same index). Every
`--sample` seconds the backlog (ready tasks), the dead rows of the task and History tables and
their sizes are read (`db.vacuum_report`). At the end of each phase, still under its
condition, pgbench runs the same lease + complete on copies of the tables for `--pgbench`
seconds (one client; the copies are emptied and refilled first): how a raw SQL queue does on
this server at that moment.

Per phase it prints: tasks offered and completed per second, the probe's claim p50/p99, the
wait p50/p99 from `created` to the lease (History), the backlog at the end, the dead rows and
the sizes of the two tables, and pgbench's transactions/s. Then the timeline, and how long the
backlog took to come back to the clean phase's after each condition ended.

It empties the task, History and worker tables first (TRUNCATE): point DATABASE_URL at a
scratch database (default postgres://postgres@127.0.0.1:5432/scylla_bench_pinned, created and
migrated), or give `--private-cluster` for a cluster of its own at the server's defaults (a
shared server may run with autovacuum off: the script prints its setting). No monitor runs:
nothing is purged, as with a retention longer than the run.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import postgres  # benchmarks/postgres.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_pinned"
QUEUE = "bench-noop"
PROBE_QUEUE = QUEUE
WORKER_OPTIONS = ("--concurrency", "16", "--poll-interval", "0.1", "-v", "0")
TICK = 0.1


@dataclass
class Phase:
    """One phase: its name, its window on the database clock, and what was measured in it."""

    name: str
    started: datetime | None = None
    ended: datetime | None = None
    offered: int = 0
    offered_in_window: int = 0
    claims: list[float] = field(default_factory=list)
    pgbench: float | None = None


@dataclass
class Sample:
    """The backlog and the two tables as VACUUM sees them, at one moment (database clock)."""

    at: datetime
    phase: str
    backlog: int
    task_dead: int
    history_dead: int
    task_bytes: int
    history_bytes: int
    oldest: str


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="tasks offered per second")
    parser.add_argument("--phase", type=float, default=120, help="seconds per phase (600: full)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--readers", type=int, default=4, help="REPEATABLE READ readers")
    parser.add_argument("--reader-pause", type=float, default=1.0, help="seconds between scans")
    parser.add_argument("--pgbench", type=float, default=5, help="pgbench seconds (0: none)")
    parser.add_argument("--sample", type=float, default=10, help="seconds between samples")
    parser.add_argument(
        "--only",
        choices=("pinned", "readers"),
        help="only the clean phase, this condition and the phase after it",
    )
    parser.add_argument(
        "--private-cluster",
        action="store_true",
        help="run on a PostgreSQL cluster of its own, at the server's defaults (autovacuum on), "
        "made in a temporary directory and removed at exit",
    )
    args = parser.parse_args()

    from throughput import PGBENCH_SCRIPTS, create_pgbench_tables, empty, private_cluster

    if args.private_cluster:
        os.environ["DATABASE_URL"] = private_cluster(parser)
    postgres.setup(parser, DEFAULT_URL)

    postgres.print_machine()
    print(f"load average before: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    print_table_settings()
    empty()
    create_pgbench_tables()
    print(
        f"offered {args.rate:,} tasks/s to {args.workers} workers {' '.join(WORKER_OPTIONS)}; "
        f"phases of {args.phase:g} s; {args.readers} readers pausing {args.reader_pause:g} s"
    )

    names = ["clean", "pinned", "after pin", "readers", "after readers"]
    if args.only == "pinned":
        names = names[:3]
    elif args.only == "readers":
        names = [names[0], *names[3:]]
    phases = [Phase(name) for name in names]
    conditions: dict[str, Callable[[], Iterator[None]]] = {
        "pinned": pinned,
        "readers": lambda: readers(args.readers, args.reader_pause),
    }
    current: list[Phase] = [phases[0]]
    samples: list[Sample] = []
    stop = threading.Event()
    with (
        tempfile.TemporaryDirectory(prefix="scylla-pinned-") as tmp,
        running_workers(args.workers, Path(tmp)),
    ):
        threads = [
            threading.Thread(target=offer, args=(args.rate, current, stop), name="offer"),
            threading.Thread(target=probe, args=(current, stop), name="probe"),
            threading.Thread(target=sample, args=(args.sample, current, samples, stop)),
        ]
        for thread in threads:
            thread.start()
        try:
            for phase in phases:
                current[0] = phase
                phase.started = database_now()
                with contextmanager(conditions.get(phase.name, nothing))():
                    stop.wait(args.phase)
                    phase.ended = database_now()
                    phase.offered_in_window = phase.offered
                    if args.pgbench:
                        phase.pgbench = pgbench(PGBENCH_SCRIPTS["lease_complete"], args.pgbench)
                print(f"{phase.name}: done", flush=True)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    print(f"load average after: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    report(phases, samples)


def nothing() -> Iterator[None]:
    yield


def pinned() -> Iterator[None]:
    """A connection in an open transaction that has a transaction id, idle."""
    import psycopg

    with psycopg.connect(dsn(), application_name="bench-pin") as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT txid_current()")
        yield
        conn.rollback()


def readers(count: int, pause: float) -> Iterator[None]:
    """`count` REPEATABLE READ transactions scanning the task and History tables."""
    import psycopg

    done = threading.Event()

    def read(n: int) -> None:
        with psycopg.connect(dsn(), application_name=f"bench-reader-{n}") as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            while not done.is_set():
                conn.execute("SELECT count(*), max(updated) FROM scylla_django_task").fetchone()
                conn.execute("SELECT count(*) FROM scylla_django_history").fetchone()
                done.wait(pause)
            conn.rollback()

    threads = [threading.Thread(target=read, args=(n,), name=f"reader-{n}") for n in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        done.set()
        for thread in threads:
            thread.join()


def dsn() -> str:
    return os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1)


def offer(rate: int, current: list[Phase], stop: threading.Event) -> None:
    """Submit `rate` tasks a second, a batch every TICK, catching up when a batch was late."""
    from django.db import connection

    from scylla_django.models import Task

    started = time.monotonic()
    sent = 0
    try:
        while not stop.is_set():
            due = int((time.monotonic() - started) * rate)
            batch = min(due - sent, rate)  # at most a second's worth at once
            if batch > 0:
                Task.objects.submit_many([{"queue": QUEUE, "spec": {}} for _ in range(batch)])
                sent += batch
                current[0].offered += batch
            stop.wait(TICK)
    finally:
        connection.close()


def probe(current: list[Phase], stop: threading.Event) -> None:
    """Lease one task every TICK and complete it; the lease call's time is a claim."""
    from django.db import connection

    from scylla_django.models import Task, Worker

    worker = Worker.objects.register([PROBE_QUEUE], capacity=1, hostname="probe")
    try:
        while not stop.is_set():
            started = time.perf_counter()
            leased = Task.objects.lease(worker, [PROBE_QUEUE], limit=1)
            elapsed = time.perf_counter() - started
            current[0].claims.append(elapsed * 1000)  # found a task or not: the same walk
            if leased:
                leased[0].complete(worker)
            stop.wait(TICK)
    finally:
        connection.close()


def sample(
    every: float, current: list[Phase], samples: list[Sample], stop: threading.Event
) -> None:
    from django.db import connection

    from scylla_django import db
    from scylla_django.enums import Status
    from scylla_django.models import History, Task

    names = (Task._meta.db_table, History._meta.db_table)
    try:
        while not stop.wait(every):
            backlog = Task.objects.filter(status=Status.READY).count()
            report = db.vacuum_report("default", names)
            assert report is not None
            tables = {t.table: t for t in report.tables}
            task, history = tables[names[0]], tables[names[1]]
            oldest = report.oldest
            samples.append(
                Sample(
                    database_now(),
                    current[0].name,
                    backlog,
                    task.dead,
                    history.dead,
                    task.size + task.index_size,
                    history.size + history.index_size,
                    oldest.label
                    if oldest and oldest.age and oldest.age.total_seconds() > 1
                    else "",
                )
            )
    finally:
        connection.close()


@contextmanager
def running_workers(count: int, tmp: Path) -> Iterator[list[int]]:
    """`count` scylla_worker processes on QUEUE; their pids once all have registered."""
    from scylla_django.models import Worker

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
    }
    command = [sys.executable, str(ROOT / "manage.py"), "scylla_worker", f"--queue={QUEUE}"]
    command += ["--handlers", "throughput_handlers", *WORKER_OPTIONS]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for n in range(count):
            log = open(tmp / f"worker-{n}.log", "wb")  # noqa: SIM115 - closed with the process
            processes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log))
        pids = [p.pid for p in processes]
        deadline = time.monotonic() + 120
        while Worker.objects.filter(pid__in=pids).count() < count:
            if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
                raise SystemExit(f"a worker did not start; see the logs in {tmp}")
            time.sleep(0.2)
        yield pids
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


def pgbench(script: str, seconds: float) -> float:
    """pgbench's lease + complete transactions/s on freshly filled copies of the tables."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE pgbench_scylla_history, pgbench_scylla_task")
        cursor.execute(
            "INSERT INTO pgbench_scylla_task (rn, queue, spec, priority, status, progress,"
            " errors, leases, attempt, snoozes)"
            " SELECT 'pg-' || g, 'bench', '{}', 0, 'ready', 0, '[]', 0, 0, 0"
            " FROM generate_series(1, 50000) AS g"
        )
        cursor.execute("ANALYZE pgbench_scylla_task")
    tps, _ = postgres.pgbench(script, seconds=seconds)
    return tps  # one run of the script (lease, then complete) is one task


def holder(oldest: object) -> str:
    """The label of the oldest holder of the horizon, when it has held it over a second."""
    age = getattr(oldest, "age", None)
    return str(getattr(oldest, "label", "")) if age and age.total_seconds() > 1 else ""


def database_now() -> datetime:
    from scylla_django import db

    return db.read_clock("default")


def print_table_settings() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname IN "
            "('scylla_django_task', 'scylla_django_history') ORDER BY relname"
        )
        for name, options in cursor.fetchall():
            print(f"{name}: {', '.join(options) if options else 'default storage parameters'}")
        cursor.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', "
            "'autovacuum_naptime', "
            "'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_cost_limit', "
            "'autovacuum_vacuum_cost_delay') ORDER BY name"
        )
        print(", ".join(f"{name}={setting}" for name, setting in cursor.fetchall()))


def report(phases: list[Phase], samples: list[Sample]) -> None:
    from django.db import connection

    print()
    header = (
        f"{'phase':<14} {'offered/s':>9} {'done/s':>7} {'claim p50':>9} {'claim p99':>9} "
        f"{'wait p50':>8} {'wait p99':>8} {'backlog':>8} {'task dead':>9} {'hist dead':>9} "
        f"{'task MB':>7} {'hist MB':>7} {'pgbench/s':>9}"
    )
    print(header)
    figures: dict[str, tuple[float, float]] = {}
    for phase in phases:
        assert phase.started is not None and phase.ended is not None
        seconds = (phase.ended - phase.started).total_seconds()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM scylla_django_task WHERE status = 'completed' "
                "AND updated >= %s AND updated < %s",
                [phase.started, phase.ended],
            )
            (done,) = cursor.fetchone()
            cursor.execute(
                "SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY "
                "extract(epoch FROM h.time - t.created)) FROM scylla_django_history h "
                "JOIN scylla_django_task t ON t.id = h.task_id WHERE h.typ = 'TaskAssignment' "
                "AND h.time >= %s AND h.time < %s",
                [phase.started, phase.ended],
            )
            waits = cursor.fetchone()[0] or [float("nan")] * 2
        claims = phase.claims or [float("nan")]
        p50 = statistics.median(claims)
        p99 = statistics.quantiles(claims, n=100)[98] if len(claims) > 1 else claims[0]
        last = [s for s in samples if s.phase == phase.name][-1:] or [None]
        end = last[0]
        throughput = done / seconds
        figures[phase.name] = (throughput, p99)
        print(
            f"{phase.name:<14} {phase.offered_in_window / seconds:>9,.0f} {throughput:>7,.0f} "
            f"{p50:>7.1f}ms {p99:>7.1f}ms {waits[0] * 1000:>6.0f}ms {waits[1] * 1000:>6.0f}ms "
            + (
                f"{end.backlog:>8,} {end.task_dead:>9,} {end.history_dead:>9,} "
                f"{end.task_bytes / 2**20:>7.1f} {end.history_bytes / 2**20:>7.1f} "
                if end
                else " " * 48
            )
            + (f"{phase.pgbench:>9,.0f}" if phase.pgbench is not None else "")
        )
    print()
    conditions = [c for c in ("pinned", "readers") if c in figures]
    for condition in conditions:
        clean_rate, clean_p99 = figures["clean"]
        rate, p99 = figures[condition]
        print(
            f"{condition}: throughput {rate / clean_rate:.0%} of clean (target >= 80%), "
            f"claim p99 {p99 / clean_p99:.1f}x clean (target <= 3x)"
        )
    clean_backlog = max((s.backlog for s in samples if s.phase == "clean"), default=0)
    for condition, after in (("pinned", "after pin"), ("readers", "after readers")):
        if condition not in figures:
            continue
        ended = next(p.started for p in phases if p.name == after)
        assert ended is not None
        back = next(
            (s.at for s in samples if s.phase == after and s.backlog <= max(clean_backlog, 1)),
            None,
        )
        when = f"{(back - ended).total_seconds():.0f} s" if back else "not within the phase"
        print(
            f"after {condition}: backlog back to the clean phase's most ({clean_backlog:,}) "
            f"in {when}"
        )
    print()
    print(
        f"{'t':>5} {'phase':<14} {'backlog':>8} {'task dead':>9} {'hist dead':>9} "
        f"{'task MB':>7} {'hist MB':>7}  holds the horizon"
    )
    start = phases[0].started
    assert start is not None
    for s in samples:
        print(
            f"{(s.at - start).total_seconds():>5.0f} {s.phase:<14} {s.backlog:>8,} "
            f"{s.task_dead:>9,} {s.history_dead:>9,} {s.task_bytes / 2**20:>7.1f} "
            f"{s.history_bytes / 2**20:>7.1f}  {s.oldest}"
        )


if __name__ == "__main__":
    main()
