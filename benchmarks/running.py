"""Time the read side at 100,000 running tasks: the admin's dashboard and task list, the
Prometheus scrape, the health check and one monitor pass with nothing expired.

    PYTHONPATH=. python benchmarks/running.py [--tasks 100000] [--requests 20] [--no-seed]

Seeds `--tasks` running tasks (10 queues, held by 10 workers of 10,000 slots each, every lease
alive for 10 more minutes, each with its TaskAssignment History row) and a tenth as many tasks
completed over the last hour, into the database named by DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/scylla_bench_running, created if missing). It prints p50/p95
server times and queries per request of each page through Django's test client, and the time
of monitor passes (every service; and the lease reset alone). Beside them, pgbench counting the
running tasks (one index-only scan of 100k entries: what any exact figure over them costs).
The target is under 500 ms each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_running"
QUEUES = 10
WORKERS = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="running tasks to seed")
    parser.add_argument("--requests", type=int, default=20, help="requests per page")
    parser.add_argument("--no-seed", action="store_true", help="time the existing rows")
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)
    postgres.print_machine()
    if not args.no_seed:
        postgres.seed_timed(seed, args.tasks)
    time_monitor()
    time_pages(args.requests)
    time_pgbench()


def seed(n: int) -> None:
    """Replace all tasks, History and workers with `n` running tasks and `n / 10` completed."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_worker, "
            "scylla_django_monitor RESTART IDENTITY"
        )
        cursor.execute(
            "INSERT INTO scylla_django_worker (hostname, pid, queues, capacity, started, last_seen,"
            " silent_at, dead_at, heartbeat_interval, lease_length)"
            " SELECT 'bench-host-' || w, 1000 + w, %s::jsonb, %s, now() - interval '1 hour',"
            " now(), now() + interval '2 hours', now() + interval '3 hours', interval '1 hour',"
            " interval '3 hours' FROM generate_series(1, %s) AS w",
            [json.dumps([f"q{q}" for q in range(QUEUES)]), n // WORKERS + 1, WORKERS],
        )
        cursor.execute(
            """
            INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress, created,
                updated, errors, result, owner, deadline, leases, attempt, snoozes, lease_length)
            SELECT 'run-' || g, 'q' || (g %% %(queues)s), jsonb_build_object('n', g), 0,
                CASE WHEN g > %(n)s THEN 'completed' ELSE 'running' END,
                CASE WHEN g > %(n)s THEN 1.0 ELSE (g %% 100) / 100.0 END,
                now() - interval '1 hour' + g * interval '1 millisecond',
                now() - (g %% 3600) * interval '1 second', '[]'::jsonb,
                CASE WHEN g > %(n)s THEN jsonb_build_object('ok', true) END,
                'worker-' || (1 + g %% %(workers)s),
                CASE WHEN g > %(n)s THEN NULL ELSE now() + interval '10 minutes' END,
                1, 0, 0, interval '10 minutes'
            FROM generate_series(1, %(n)s + %(n)s / 10) AS g
            """,
            {"n": n, "queues": QUEUES, "workers": WORKERS},
        )
        cursor.execute(
            """
            INSERT INTO scylla_django_history (task_id, typ, worker, progress, time)
            SELECT id, 'TaskAssignment', owner, NULL, created FROM scylla_django_task
            UNION ALL
            SELECT id, 'TaskCompletion', owner, 1.0, updated FROM scylla_django_task
            WHERE status = 'completed'
            ORDER BY 1
            """
        )
        cursor.execute("VACUUM ANALYZE scylla_django_task, scylla_django_history")


def time_monitor() -> None:
    """A first pass (it registers the monitor and rolls up the History), then the steady
    passes: every service, and the lease reset alone."""
    from scylla_django.models import Task
    from scylla_django.monitor import Monitor

    monitor = Monitor(interval=3600, retention=timedelta(days=365))
    started = time.perf_counter()
    first = monitor.run_once()
    print(f"monitor first pass: {time.perf_counter() - started:.2f} s (reset {first.reset})")
    passes, resets = [], []
    for _ in range(5):
        started = time.perf_counter()
        result = monitor.run_once()
        passes.append((time.perf_counter() - started) * 1000)
        assert result.reset == 0, result
        started = time.perf_counter()
        assert Task.objects.reset_expired() == 0
        resets.append((time.perf_counter() - started) * 1000)
    print(f"monitor pass, nothing expired: p50 {statistics.median(passes):.1f} ms")
    print(f"  of which the lease reset: p50 {statistics.median(resets):.1f} ms")


def timed(count: int, request: Callable[[], int]) -> tuple[float, float]:
    """p50 and p95 in ms of `count` calls of `request` (after one warm-up call)."""
    request()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        status = request()
        times.append((time.perf_counter() - started) * 1000)
        if status != 200:
            raise SystemExit(f"HTTP {status}")
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, round(0.95 * len(times)) - 1)]


def time_pages(requests: int) -> None:
    """Print p50/p95, queries and bytes of each page."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    user_model = get_user_model()
    user = user_model.objects.filter(username="bench").first()
    if user is None:
        user = user_model.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    pages = {
        "admin dashboard": "/admin/scylla_django/task/dashboard/",
        "admin task list, first page": "/admin/scylla_django/task/",
        "admin task list, running": "/admin/scylla_django/task/?status=running",
        "admin worker list": "/admin/scylla_django/worker/",
        "API task list, running": "/api/scylla/tasks/?status=running",
        "GET /metrics": "/metrics",
        "GET /health/ (database only)": "/api/scylla/health/",
        "GET /health/ (every check)": "/api/scylla/health/?monitor=true&max_lag=86400"
        "&hostname=bench-host-1",
    }
    print(f"{'page':32} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'bytes':>9}")
    for name, url in pages.items():
        queries = 0

        def count(execute: Callable[..., Any], *args: Any) -> Any:
            nonlocal queries
            queries += 1
            return execute(*args)

        with connection.execute_wrapper(count):
            response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        p50, p95 = timed(requests, lambda url=url: client.get(url).status_code)
        print(f"{name:32} {p50:8.1f} {p95:8.1f} {queries:8} {len(response.content):9,}")


def time_pgbench() -> None:
    """pgbench counting the running tasks: the floor of any exact figure over them."""
    import shutil

    if shutil.which("pgbench") is None:
        print("(pgbench is not on PATH: no pgbench figure)")
        return
    tps, latencies = postgres.pgbench(
        "SELECT count(*) FROM scylla_django_task WHERE status = 'running';", transactions=50
    )
    latencies.sort()
    print(
        f"pgbench, count(*) of the running tasks, 1 client: p50 "
        f"{statistics.median(latencies):.1f} ms ({tps:,.0f} tps)"
    )


if __name__ == "__main__":
    main()
