"""Locks taken by the lease: lease latency and drain throughput with one lock per task, beside
the same figures for tasks without keys.

    PYTHONPATH=. python benchmarks/lease_keys.py [--tasks 200000] [--keys 10000] [--leases 300]
        [--seconds 5]

It replaces every task of the database named by DATABASE_URL (default postgres://postgres@
127.0.0.1:5432/scylla_bench_keys, created if missing) with `--tasks` ready tasks in queue `k`,
each holding one exclusive lock among `--keys` (`locks=["key-<n>"]`, interleaved), and as many
without keys in queue `p`. Then, per queue, it times `--leases` calls of `lease(limit=1)` and
of `lease(limit=10)` by one worker (each leased task put back to ready after its call, outside
the timing, so the backlog stays the same), and drains the queue for `--seconds` with one
process leasing 10 and finishing them in one `finish_many()` call at a time. Client-side times,
round trip included.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_keys"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200_000, help="ready tasks per queue")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct locks in queue k")
    parser.add_argument("--leases", type=int, default=300, help="timed leases per case")
    parser.add_argument("--seconds", type=float, default=5.0, help="drain time per queue")
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)
    import django
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        (version,) = cursor.fetchone() or ("?",)
    print(f"{os.cpu_count()} CPUs, PostgreSQL {version}, Django {django.get_version()}")
    seed(args.tasks, args.keys)
    print(f"{'queue':>12} {'limit':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for queue, label in (("p", "no keys"), ("k", "1 lock/task")):
        for limit in (1, 10):
            times = time_leases(queue, limit, args.leases)
            p50 = statistics.median(times)
            p99 = statistics.quantiles(times, n=100)[98]
            print(f"{label:>12} {limit:>5} {p50:>8.2f} {p99:>8.2f} {max(times):>8.2f}", flush=True)
    for queue, label in (("p", "no keys"), ("k", "1 lock/task")):
        rate = drain(queue, args.seconds)
        print(f"drain {label}: {rate:,.0f} tasks/s (lease 10 + finish_many, one process)")


def seed(n: int, keys: int) -> None:
    """Replace all tasks, History, workers and key rows with `n` ready tasks with one lock each
    in queue k (over `keys` locks) and `n` without keys in queue p."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_worker, "
            "scylla_django_key, scylla_django_hold RESTART IDENTITY"
        )
        cursor.execute(
            """
            INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress, created,
                updated, errors, leases, attempt, keys)
            SELECT q || '-' || g, q, '{}'::jsonb, 0, 'ready', 0,
                now() - make_interval(secs => (%s - g) / 1000.0), now(), '[]', 0, 1,
                CASE WHEN q = 'k' THEN jsonb_build_array('L:key-' || (g %% %s)) END
            FROM generate_series(1, %s) AS g, unnest(ARRAY['k', 'p']) AS q
            """,
            [n, keys, n],
        )
        cursor.execute(
            "INSERT INTO scylla_django_key (name, starts) "
            "SELECT 'L:key-' || g, '[]'::jsonb FROM generate_series(0, %s - 1) AS g",
            [keys],
        )
        cursor.execute("VACUUM ANALYZE scylla_django_task")
        cursor.execute("VACUUM ANALYZE scylla_django_key")
    print(f"seeded 2 x {n:,} ready tasks ({keys:,} locks) in {time.perf_counter() - started:.1f} s")


def time_leases(queue: str, limit: int, count: int) -> list[float]:
    """Milliseconds per `lease()` call; the leased tasks are made ready again after each."""
    from scylla_django.models import Task, Worker

    worker = Worker.objects.register(queues=[queue], capacity=limit)
    for _ in range(5):  # warm the connection and the plan cache
        put_back(Task.objects.lease(worker, [queue], limit=limit, lease_length=60))
    times = []
    for _ in range(count):
        started = time.perf_counter()
        leased = Task.objects.lease(worker, [queue], limit=limit, lease_length=60)
        times.append((time.perf_counter() - started) * 1000)
        assert len(leased) == limit, (queue, limit, len(leased))
        put_back(leased)
    return times


def put_back(tasks: list[object]) -> None:
    from scylla_django.models import Task

    Task.objects.filter(pk__in=[t.pk for t in tasks]).update(  # type: ignore[attr-defined]
        status="ready", owner=None, deadline=None, leases=0
    )


def drain(queue: str, seconds: float) -> float:
    """Tasks per second that one process leases (10 at a time) and completes."""
    from scylla_django.models import Outcome, Task, Worker

    worker = Worker.objects.register(queues=[queue], capacity=10)
    done = 0
    end = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < end:
        leased = Task.objects.lease(worker, [queue], limit=10, lease_length=60)
        Task.objects.finish_many(worker, [Outcome(pk=t.pk, lease=t.leases) for t in leased])
        done += len(leased)
    return done / (time.perf_counter() - started)


if __name__ == "__main__":
    main()
