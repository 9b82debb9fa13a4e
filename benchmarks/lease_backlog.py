"""Lease latency at a large backlog: p50/p99 of `Task.objects.lease()` at 1M ready tasks.

    PYTHONPATH=. python benchmarks/lease_backlog.py [--tasks 1000000] [--leases 300]

For each layout (all tasks in 1 queue, then spread over 50 queues), it replaces every task of
the database named by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
scylla_bench_lease, created if missing) with `--tasks` ready tasks of mixed priorities, then
times `--leases` calls of `lease(limit=1)` and of `lease(limit=10)` by one registered worker,
asking for every queue of the layout, with 50 queues also for a random 10 of them, and for
every queue once more with a running-task limit on each (`max_running`, "limited"). Each
leased task is put back to ready after its call (outside the timing), so the backlog stays
the same. Times are measured in the client, round trip included.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_lease"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000, help="ready tasks to seed")
    parser.add_argument("--leases", type=int, default=300, help="timed leases per case")
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)

    postgres.print_machine()
    print(f"{'queues':>6} {'asked':>6} {'limit':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for layout in (1, 50):
        queues = [f"q{n:02d}" for n in range(layout)]
        seed(args.tasks, queues)
        cases = [(queues, "")]
        if layout > 10:
            cases.append((random.Random(7).sample(queues, 10), ""))
        cases.append((queues, "limited"))
        for asked, note in cases:
            if note:
                limit_queues(asked)
            for limit in (1, 10):
                times = time_leases(asked, limit, args.leases)
                p50 = statistics.median(times)
                p99 = statistics.quantiles(times, n=100)[98]
                print(
                    f"{layout:>6} {len(asked):>6} {limit:>5} {p50:>8.2f} {p99:>8.2f} "
                    f"{max(times):>8.2f} {note}",
                    flush=True,
                )


def seed(n: int, queues: list[str]) -> None:
    """Replace all tasks, History, workers and queue settings with `n` ready tasks over `queues`
    (one INSERT … SELECT)."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_worker, "
            "scylla_django_queuesetting "
            "RESTART IDENTITY"
        )
        cursor.execute(
            """
            INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress, created,
                updated, errors, leases, attempt, snoozes)
            SELECT 'bench-' || g, (%s::text[])[1 + g %% %s], '{}'::jsonb, (g::bigint * 7919) %% 10,
                'ready', 0, now() - make_interval(secs => (%s - g) / 1000.0), now(), '[]', 0, 0, 0
            FROM generate_series(1, %s) AS g
            """,
            [queues, len(queues), n, n],
        )
        cursor.execute("VACUUM ANALYZE scylla_django_task")
    print(
        f"seeded {n:,} ready tasks over {len(queues)} queue(s) "
        f"in {time.perf_counter() - started:.1f} s",
        flush=True,
    )


def limit_queues(queues: list[str]) -> None:
    """Give each of `queues` a running-task limit far above what the timed leases hold, so
    every lease takes the limited path (the queues' settings rows locked, their room counted)."""
    from scylla_django.models import QueueSetting

    for queue in queues:
        QueueSetting.objects.update_or_create(queue=queue, defaults={"max_running": 1_000})


def time_leases(queues: list[str], limit: int, count: int) -> list[float]:
    """Milliseconds per `lease()` call; the leased tasks are made ready again after each."""
    from scylla_django.models import Task, Worker

    worker = Worker.objects.register(queues=queues, capacity=limit)
    for _ in range(5):  # warm the connection and the plan cache
        put_back(Task.objects.lease(worker, queues, limit=limit, lease_length=60))
    times = []
    for _ in range(count):
        started = time.perf_counter()
        leased = Task.objects.lease(worker, queues, limit=limit, lease_length=60)
        times.append((time.perf_counter() - started) * 1000)
        assert len(leased) == limit
        put_back(leased)
    return times


def put_back(tasks: list[object]) -> None:
    from scylla_django.models import Task

    Task.objects.filter(pk__in=[t.pk for t in tasks]).update(  # type: ignore[attr-defined]
        status="ready", owner=None, deadline=None, leases=0
    )


if __name__ == "__main__":
    main()
