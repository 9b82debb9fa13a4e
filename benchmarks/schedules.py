"""Schedules at scale: 5,000 schedules with run constraints, ticked by 3 monitors at once.

    PYTHONPATH=. python benchmarks/schedules.py [--schedules 5000] [--monitors 3] [--minutes 70]

Replaces every schedule, waiting firing and task of the database named by DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/scylla_bench_schedules, created if missing) with
`--schedules` schedules in five equal kinds: every minute with max_concurrent=1 (wait); every 5
minutes with a window of 40 minutes an hour... (wait, merged while closed); every 10 minutes
with max_runs="3/h" (skip); hourly cron with min_gap="30m" in Europe/Malta; daily cron at 03:00
with a window 01:00-02:00 (waits, wait_timeout 1h then forced). `--monitors` threads (each its
own connection, as separate monitor processes would be) then pass over them together, minute
by minute on a shared fake clock, for `--minutes` minutes from 23:55 UTC, so that the passes at
the top of the hour have about 4,000 due schedules. A worker's work is simulated by completing
every ready task between minutes (outside the timing).

It prints, per pass, the slowest monitor's time, what the pass did (submitted, waiting,
merged, skipped, released) and, at the end, the median and the worst pass beside the monitor's
default interval (5 s): a pass must stay well under it. No thread per schedule: each monitor
walks the due schedules in batches under SKIP LOCKED.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_schedules"
START = datetime(2026, 6, 1, 23, 55, tzinfo=UTC)
KINDS = [
    {"every": "1m", "max_concurrent": 1},
    {"every": "5m", "window": "00:00-00:40"},
    {"every": "10m", "max_runs": "3/h", "when_unmet": "skip"},
    {"cron": "0 * * * *", "timezone": "Europe/Malta", "min_gap": "30m"},
    {
        "cron": "0 3 * * *",
        "window": "01:00-02:00",
        "wait_timeout": "1h",
        "on_timeout": "force",
    },
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=5000)
    parser.add_argument("--monitors", type=int, default=3)
    parser.add_argument("--minutes", type=int, default=70)
    args = parser.parse_args()
    postgres.setup(parser, DEFAULT_URL)
    postgres.print_machine()
    seed(args.schedules)
    print(
        f"{args.schedules:,} schedules, {args.monitors} monitors, {args.minutes} passes "
        "(one a minute of the fake clock)"
    )
    print(f"{'clock':>5} {'pass s':>7} {'due':>5} outcomes")
    times = []
    for minute in range(1, args.minutes + 1):
        now = START + timedelta(minutes=minute)
        seconds, outcomes, due = one_pass(now, args.monitors)
        times.append(seconds)
        if outcomes or minute % 10 == 0:
            shown = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            print(f"{now:%H:%M} {seconds:>7.3f} {due:>5} {shown}", flush=True)
        finish_ready()
    print(
        f"pass: median {statistics.median(times):.3f} s, worst {max(times):.3f} s "
        "(the monitor's default interval: 5 s)"
    )


def seed(count: int) -> None:
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
                next_run=next_tick(definition, START),
                **definition.fields(),
            )
        )
    Schedule.objects.bulk_create(rows, batch_size=1000)


def one_pass(now: datetime, monitors: int) -> tuple[float, Counter[str], int]:
    """Every monitor's `tick(now)` at once; the slowest one's time, the outcomes, due count."""
    from django.db import connection

    from scylla_django.models import Schedule
    from scylla_django.schedules import tick

    due = Schedule.objects.filter(enabled=True, next_run__lte=now).count()
    start = threading.Barrier(monitors)
    outcomes: Counter[str] = Counter()
    spent: list[float] = []
    lock = threading.Lock()

    def monitor() -> None:
        try:
            start.wait()
            began = time.perf_counter()
            done = tick(now=now)
            took = time.perf_counter() - began
            with lock:
                spent.append(took)
                outcomes.update(
                    "released"
                    if d.time < now - timedelta(minutes=1) and d.outcome == "submitted"
                    else d.outcome
                    for d in done
                )
        finally:
            connection.close()

    threads = [threading.Thread(target=monitor) for _ in range(monitors)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return max(spent), outcomes, due


def finish_ready() -> None:
    """Complete every ready task at once (the workers' part, outside the timing)."""
    from scylla_django.db import Now
    from scylla_django.enums import Status
    from scylla_django.models import Task

    Task.objects.filter(status=Status.READY).update(status=Status.COMPLETED, updated=Now())


if __name__ == "__main__":
    main()
