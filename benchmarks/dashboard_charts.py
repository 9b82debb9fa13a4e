"""Time the dashboard's per-queue charts (their JSON endpoint) over a week of History.

    PYTHONPATH=. python benchmarks/dashboard_charts.py [--tasks 500000] [--requests 20]

Seeds `--tasks` finished tasks (95% completed, 5% aborted) over 10 queues, created evenly over
the last 7 days and each leased 0-120 s after it was created, with their History: a
`TaskAssignment` and a `TaskCompletion` or `TaskAbort` each (1,000,000 History rows by default),
into the database named by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
scylla_bench_charts, created if missing). It migrates first and reseeds on every run.

Then, for each range, it requests `admin/scylla_django/task/dashboard/charts/?range=…` once
with an empty cache before any roll-up (every interval read from History), runs the monitor's
`QueueRollups` service until it has caught up (the first roll-up: the week's History, a run
stopping between two hours after its 5 s budget) and prints its time and once more, and
requests each range again through Django's test client, as a superuser: it prints the History
rows in the window, the time of a first request with an empty cache (cold) and p50/p95 of the
`--requests` requests that follow (warm), all read from the rollups and the minutes since.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

import postgres  # benchmarks/postgres.py, beside this script
from admin import status_of, timed  # benchmarks/admin.py, beside this script

if TYPE_CHECKING:
    from django.test import Client

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_charts"
QUEUES = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500_000, help="finished tasks to seed")
    parser.add_argument("--requests", type=int, default=20, help="requests per range")
    parser.add_argument("--no-seed", action="store_true", help="time the existing rows")
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)

    postgres.print_machine()
    if not args.no_seed:
        postgres.seed_timed(seed, args.tasks)
    time_ranges(args.requests)


def login() -> Client:
    """A test client logged in as a superuser."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    user_model = get_user_model()
    user = user_model.objects.filter(username="bench").first()
    if user is None:
        user = user_model.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    return client


def cold(client: Client, key: str) -> float:
    """The time in ms of a request for the charts of `key` with an empty cache."""
    from django.core.cache import cache

    cache.clear()
    started = time.perf_counter()
    status_of(client, f"/admin/scylla_django/task/dashboard/charts/?range={key}")
    return (time.perf_counter() - started) * 1000


def seed(n: int) -> None:
    """Replace all tasks and History with `n` finished tasks of the last week, and theirs."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_queue_rollup"
            " RESTART IDENTITY"
        )
        cursor.execute(
            """
            INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress, created,
                updated, not_before, errors, result, owner, deadline, leases, attempt, snoozes)
            SELECT 'bench-' || g, 'q' || (g %% %(queues)s), '{}'::jsonb, 0,
                CASE WHEN g %% 20 = 0 THEN 'aborted' ELSE 'completed' END, 1.0,
                c.created, c.created + interval '3 minutes', NULL,
                CASE WHEN g %% 20 = 0 THEN '[{"code": "boom"}]'::jsonb ELSE '[]'::jsonb END,
                NULL, 'worker-' || (1 + g %% 20), NULL, 1, 0, 0
            FROM generate_series(1, %(n)s) AS g
            CROSS JOIN LATERAL (
                SELECT now() - interval '7 days' + g * (interval '7 days' - interval '5 minutes')
                    / %(n)s AS created
            ) AS c
            """,
            {"n": n, "queues": QUEUES},
        )
        cursor.execute(
            """
            INSERT INTO scylla_django_history (task_id, typ, worker, progress, time)
            SELECT id, 'TaskAssignment', owner, NULL,
                created + (id * 37 % 120) * interval '1 second'
            FROM scylla_django_task
            UNION ALL
            SELECT id, CASE status WHEN 'completed' THEN 'TaskCompletion' ELSE 'TaskAbort' END,
                owner, progress, updated
            FROM scylla_django_task
            ORDER BY 1
            """
        )
        cursor.execute("VACUUM ANALYZE scylla_django_task, scylla_django_history")


def time_ranges(requests: int) -> None:
    """Print the cold time per range from History, the first roll-up's time, then the cold
    time and warm p50/p95 per range from the rollups, and the History rows each range holds."""
    from django.utils import timezone

    from scylla_django.admin import charts
    from scylla_django.models import History, QueueRollup
    from scylla_django.monitor import QueueRollups

    client = login()
    print(f"History rows: {History.objects.count():,}")
    QueueRollup.objects.all().delete()
    print("before any roll-up (History):")
    for key in charts.RANGES:
        print(f"  {key:8} cold {cold(client, key):8.1f} ms")
    service = QueueRollups()
    started = time.perf_counter()
    rows = 0
    while True:  # each run stops between two hours once its budget is spent
        rows += service.run("default")["rolled_up"]
        rolled = QueueRollup.objects.rolled_until()
        if rolled is not None and rolled >= timezone.now() - timedelta(minutes=2):
            break
    took = time.perf_counter() - started
    print(f"first roll-up (a week): {rows:,} rows in {took:.1f} s, {service.runs} runs")
    started = time.perf_counter()
    service.run("default")
    print(f"next roll-up (a minute or two): {(time.perf_counter() - started) * 1000:.0f} ms")
    print(f"{'range':10} {'rows in range':>14} {'cold ms':>8} {'p50 ms':>8} {'p95 ms':>8}")
    for key, chosen in charts.RANGES.items():
        rows = History.objects.filter(time__gte=chosen.first(timezone.now())).count()
        url = f"/admin/scylla_django/task/dashboard/charts/?range={key}"
        first = cold(client, key)
        p50, p95 = timed(requests, partial(status_of, client, url))
        print(f"{key:10} {rows:14,} {first:8.1f} {p50:8.1f} {p95:8.1f}")


if __name__ == "__main__":
    main()
