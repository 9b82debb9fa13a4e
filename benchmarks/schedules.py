"""Schedules at scale: 5,000 schedules with run constraints, ticked by 3 monitors at once.

    PYTHONPATH=. python benchmarks/schedules.py [--schedules 5000] [--monitors 3] [--minutes 70]

Replaces every schedule, waiting firing and task of the database named by DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/scylla_bench_schedules, created if missing) with
`--schedules` schedules in five equal kinds: every minute with max_concurrent=1 (wait); every 5
minutes with a window 00:00-00:40 UTC (wait: a firing waits from 00:40, later ones merge);
every 10 minutes with max_runs="3/h" (skip); hourly cron with min_gap="30m" in Europe/Malta;
daily cron at 00:00 with a window 00:30-01:00 (waits, wait_timeout 20m, then forced).
`--monitors` processes (each with its connection, as separate monitors) then pass over them
together, minute by minute on a shared fake clock, for `--minutes` minutes from 23:55 UTC of
the database's next day (so that min_gap, counted from the runs' ends on the database clock,
has passed), so that the pass at midnight has 4,000 due schedules. A worker's work is
simulated by completing every ready task between passes (outside the timing).

It prints, per pass, the slowest monitor's time, what the pass did (submitted, waiting,
merged, skipped, released) and, at the end, the median and the worst pass beside the monitor's
default interval (5 s): a pass must stay well under it. No thread per schedule: each monitor
walks the due schedules in batches under SKIP LOCKED.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time as clock
from collections import Counter
from datetime import UTC, datetime, time, timedelta
from multiprocessing.connection import Connection

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_schedules"
KINDS = [
    {"every": "1m", "max_concurrent": 1},
    {"every": "5m", "window": "00:00-00:40"},
    {"every": "10m", "max_runs": "3/h", "when_unmet": "skip"},
    {"cron": "0 * * * *", "timezone": "Europe/Malta", "min_gap": "30m"},
    {"cron": "0 0 * * *", "window": "00:30-01:00", "wait_timeout": "20m", "on_timeout": "force"},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=5000)
    parser.add_argument("--monitors", type=int, default=3)
    parser.add_argument("--minutes", type=int, default=70)
    args = parser.parse_args()
    postgres.setup(parser, DEFAULT_URL)
    postgres.print_machine()
    from scylla_django.db import read_clock

    today = read_clock("default").astimezone(UTC).date()
    start = datetime.combine(today + timedelta(days=1), time(23, 55), tzinfo=UTC)
    seed(args.schedules, start)
    print(
        f"{args.schedules:,} schedules, {args.monitors} monitors, {args.minutes} passes "
        "(one a minute of the fake clock)"
    )
    print(f"{'clock':>5} {'pass s':>7} {'due':>5} outcomes")
    from django.db import connections

    connections.close_all()
    context = multiprocessing.get_context("fork")
    pipes, processes = [], []
    for _ in range(args.monitors):
        mine, theirs = context.Pipe()
        process = context.Process(target=monitor_process, args=(theirs,), daemon=True)
        process.start()
        pipes.append(mine)
        processes.append(process)
    times = []
    for minute in range(1, args.minutes + 1):
        now = start + timedelta(minutes=minute)
        seconds, outcomes, due = one_pass(now, pipes)
        times.append(seconds)
        if outcomes or minute % 10 == 0:
            shown = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            print(f"{now:%H:%M} {seconds:>7.3f} {due:>5} {shown}", flush=True)
        finish_ready()
    for pipe in pipes:
        pipe.send(None)
    for process in processes:
        process.join(timeout=30)
    print(
        f"pass: median {statistics.median(times):.3f} s, worst {max(times):.3f} s "
        "(the monitor's default interval: 5 s)"
    )


def seed(count: int, start: datetime) -> None:
    """Replace all schedules, waiting firings and tasks with `count` schedules."""
    from django.db import connection

    from scylla_django.models import Schedule
    from scylla_django.schedules import clean_definition, next_tick

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_waitingrun, scylla_django_schedule, scylla_django_task, "
            "scylla_django_history CASCADE"
        )
    rows = []
    for n in range(count):
        raw = {"queue": "bench", "spec": {"n": n}, **KINDS[n % len(KINDS)]}
        definition = clean_definition(f"s{n:05d}", raw)
        rows.append(
            Schedule(
                name=definition.name,
                next_run=next_tick(definition, start),
                **definition.fields(),
            )
        )
    Schedule.objects.bulk_create(rows, batch_size=1000)


def monitor_process(pipe: Connection) -> None:
    """One monitor: for each clock value received, `tick(now)`; sends back its time and what
    it did."""
    from django.db import connections

    from scylla_django.schedules import tick

    connections.close_all()  # a connection of its own, not the parent's
    while (now := pipe.recv()) is not None:
        began = clock.perf_counter()
        done = tick(now=now)
        took = clock.perf_counter() - began
        late = now - timedelta(minutes=1)
        outcomes = Counter(
            "released" if d.outcome == "submitted" and d.time < late else d.outcome for d in done
        )
        pipe.send((took, outcomes))


def one_pass(now: datetime, pipes: list[Connection]) -> tuple[float, Counter[str], int]:
    """Every monitor's `tick(now)` at once; the slowest one's time, the outcomes, due count."""
    from scylla_django.models import Schedule

    due = Schedule.objects.filter(enabled=True, next_run__lte=now).count()
    for pipe in pipes:
        pipe.send(now)
    outcomes: Counter[str] = Counter()
    spent = []
    for pipe in pipes:
        took, done = pipe.recv()
        spent.append(took)
        outcomes.update(done)
    return max(spent), outcomes, due


def finish_ready() -> None:
    """Complete every ready task at once (the workers' part, outside the timing)."""
    from scylla_django.db import Now
    from scylla_django.enums import Status
    from scylla_django.models import Task

    Task.objects.filter(status=Status.READY).update(status=Status.COMPLETED, updated=Now())


if __name__ == "__main__":
    main()
