"""Time the operations endpoints on a large PostgreSQL table: the Prometheus scrape and the
API's health check.

    PYTHONPATH=. python benchmarks/ops.py [--tasks 1000000] [--requests 30] [--no-seed]

Seeds `--tasks` tasks as `benchmarks/admin.py` does (90% terminal over 30 days, the rest
ready or running over 10 queues, with History and 20 workers) into the database named by
DATABASE_URL (default postgres://postgres@127.0.0.1:5432/scylla_bench_ops, created if
missing), registers a monitor and makes one pass, then requests `GET /metrics` and
`GET /api/scylla/health/` (every check) `--requests` times each through Django's test client
and prints p50/p95 server times and the queries per request. The target is under 500 ms.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_ops"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000, help="tasks to seed")
    parser.add_argument("--requests", type=int, default=30, help="requests per endpoint")
    parser.add_argument("--no-seed", action="store_true", help="time the existing rows")
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)
    from admin import seed, timed  # benchmarks/admin.py: the same data set

    postgres.print_machine()
    if not args.no_seed:
        postgres.seed_timed(seed, args.tasks)
    prepare()
    time_endpoints(args.requests, timed)


def prepare() -> None:
    """Workers alive (a few silent), and one monitor pass."""
    from datetime import timedelta

    from django.db.models.functions import Now

    from scylla_django.models import Monitor, Worker
    from scylla_django.monitor import Monitor as MonitorLoop

    # Long intervals, so that no worker turns silent while the endpoints are timed.
    Worker.objects.update(
        last_seen=Now(),
        heartbeat_interval=timedelta(hours=1),
        lease_length=timedelta(hours=3),
        silent_at=Now() + timedelta(hours=2),
        dead_at=Now() + timedelta(hours=3),
    )
    Worker.objects.filter(pk__lte=3).update(silent_at=Now() - timedelta(seconds=1))
    Monitor.objects.all().delete()
    started = time.perf_counter()
    # A long retention: the pass resets the seeded expired leases but purges nothing.
    result = MonitorLoop(interval=3600, retention=timedelta(days=365)).run_once()
    print(
        f"monitor pass: reset {result.reset} in {time.perf_counter() - started:.2f} s "
        "(registers the monitor)"
    )


def time_endpoints(requests: int, timed: Callable[[int, Callable[[], int]], Any]) -> None:
    from django.db import connection
    from django.test import Client

    client = Client()
    endpoints = {
        "GET /metrics": "/metrics",
        "GET /health/ (database only)": "/api/scylla/health/",
        "GET /health/ (every check)": "/api/scylla/health/?monitor=true&max_lag=86400"
        "&hostname=bench-host-1",
    }
    print(f"{'endpoint':32} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'bytes':>8}")
    for name, url in endpoints.items():
        queries = 0

        def count(execute: Callable[..., Any], *args: Any) -> Any:
            nonlocal queries
            queries += 1
            return execute(*args)

        size = len(client.get(url).content)
        with connection.execute_wrapper(count):
            client.get(url)
        per_request = queries
        p50, p95 = timed(requests, lambda url=url: client.get(url).status_code)
        print(f"{name:32} {p50:8.1f} {p95:8.1f} {per_request:8d} {size:8d}")


if __name__ == "__main__":
    main()
