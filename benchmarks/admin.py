"""Time the admin console on a large PostgreSQL table, then time a bulk purge.

    PYTHONPATH=. python benchmarks/admin.py [--tasks 1000000] [--requests 20]

Seeds `--tasks` tasks (90% terminal, their `updated` spread over 30 days; the rest ready or
running over 10 queues, a tenth of the running ones past their deadline) with their History,
into the database named by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
scylla_bench_admin, created if missing). It migrates first and reseeds on every run. Then it
requests each admin page `--requests` times through Django's test client, logged in as a
superuser, and prints p50/p95 server times and the queries per page; finally it purges the
terminal tasks older than 10 days with `Task.objects.purge()` and prints rows/s and batches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_admin"
QUEUES = 10
WORKERS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000, help="tasks to seed")
    parser.add_argument("--requests", type=int, default=20, help="requests per page")
    parser.add_argument("--no-seed", action="store_true", help="time the existing rows")
    parser.add_argument("--no-purge", action="store_true", help="skip the purge timing")
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)

    postgres.print_machine()
    if not args.no_seed:
        postgres.seed_timed(seed, args.tasks)
    time_pages(args.requests)
    if not args.no_purge:
        time_purge()


def seed(n: int) -> None:
    """Replace all tasks, History and workers with `n` generated tasks (one INSERT … SELECT)."""
    from django.db import connection

    terminal = n * 9 // 10
    ready = n * 95 // 1000
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_worker "
            "RESTART IDENTITY"
        )
        cursor.execute(
            "INSERT INTO scylla_django_worker (hostname, pid, queues, capacity, started, last_seen)"
            " SELECT 'bench-host-' || (w %% 4), 1000 + w, %s::jsonb, 250, now() - interval '1 day',"
            " now() FROM generate_series(1, %s) AS w",
            [json.dumps([f"q{q}" for q in range(QUEUES)]), WORKERS],
        )
        # Rows 1..terminal finished over the last 30 days; then the ready backlog of the last
        # two hours; then the running tasks, one in ten past its deadline.
        cursor.execute(
            """
            INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress, created,
                updated, not_before, errors, result, owner, deadline, leases, attempt, snoozes)
            SELECT 'bench-' || g, 'q' || (g %% %(queues)s),
                jsonb_build_object('n', g, 'payload', repeat('x', 100)), (g * 31) %% 256,
                s.status,
                CASE s.status WHEN 'completed' THEN 1.0 WHEN 'ready' THEN 0.0
                    ELSE (g %% 100) / 100.0 END,
                s.created, s.updated, NULL,
                CASE s.status WHEN 'aborted' THEN jsonb_build_array(jsonb_build_object(
                    'code', 'boom', 'args', jsonb_build_object('n', g),
                    'description', 'the handler raised')) ELSE '[]'::jsonb END,
                CASE s.status WHEN 'completed' THEN jsonb_build_object('ok', true) END,
                CASE WHEN s.status IN ('ready', 'cancelled') THEN NULL
                    ELSE 'worker-' || (1 + g / 7 %% %(workers)s) END,
                CASE s.status WHEN 'running' THEN
                    CASE WHEN g %% 10 = 0 THEN now() - interval '5 minutes'
                    ELSE now() + interval '30 seconds' END END,
                CASE s.status WHEN 'ready' THEN 0 ELSE 1 + (g %% 50 = 0)::int END, 0, 0
            FROM generate_series(1, %(n)s) AS g
            CROSS JOIN LATERAL (
                SELECT
                    CASE WHEN g > %(terminal)s + %(ready)s THEN 'running'
                        WHEN g > %(terminal)s THEN 'ready'
                        WHEN g / 10 %% 20 < 17 THEN 'completed'
                        WHEN g / 10 %% 20 < 19 THEN 'aborted'
                        ELSE 'cancelled' END AS status,
                    CASE WHEN g > %(terminal)s + %(ready)s THEN now() - interval '10 minutes'
                        WHEN g > %(terminal)s THEN now() - interval '2 hours'
                            + (g - %(terminal)s) * interval '2 hours' / %(ready)s
                        ELSE now() - interval '30 days'
                            + g * (interval '30 days' - interval '10 minutes') / %(terminal)s
                    END AS created
            ) AS c
            CROSS JOIN LATERAL (
                SELECT c.status, c.created,
                    CASE WHEN g > %(terminal)s + %(ready)s
                            THEN now() - (g %% 60) * interval '1 second'
                        WHEN g > %(terminal)s THEN c.created
                        ELSE c.created + (g * 37 %% 600) * interval '1 second'
                    END AS updated
            ) AS s
            """,
            {"n": n, "terminal": terminal, "ready": ready, "queues": QUEUES, "workers": WORKERS},
        )
        cursor.execute(
            """
            INSERT INTO scylla_django_history (task_id, typ, worker, progress, time)
            SELECT id, 'TaskAssignment', owner, NULL, created + interval '1 second'
            FROM scylla_django_task WHERE status <> 'ready'
            UNION ALL
            SELECT id, CASE status WHEN 'completed' THEN 'TaskCompletion'
                WHEN 'aborted' THEN 'TaskAbort' ELSE 'TaskCancellation' END,
                owner, progress, updated
            FROM scylla_django_task WHERE status IN ('completed', 'aborted', 'cancelled')
            ORDER BY 1
            """
        )
        # What autovacuum would have done on a table that grew over 30 days.
        cursor.execute("VACUUM ANALYZE scylla_django_task, scylla_django_history")


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


def status_of(client: Any, url: str) -> int:
    """GET `url`; its HTTP status."""
    status: int = client.get(url).status_code
    return status


def time_pages(requests: int) -> None:
    """Print p50/p95 and queries per page for each admin page."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.db.models.functions import Now
    from django.test import Client

    from scylla_django.models import Task, Worker

    Worker.objects.update(last_seen=Now())  # the seeded workers are alive
    user_model = get_user_model()
    user = user_model.objects.filter(username="bench").first()
    if user is None:
        user = user_model.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    task = Task.objects.filter(status="aborted").order_by("-id").first()
    assert task is not None, "no task was seeded"
    pages = {
        "changelist": "/admin/scylla_django/task/",
        "filtered (status=running, queue=q3)": "/admin/scylla_django/task/?status=running&queue=q3",
        "filtered (status=completed, page 50)": "/admin/scylla_django/task/?status=completed&p=50",
        "search (rn)": f"/admin/scylla_django/task/?q={task.rn}",
        "search (owner)": "/admin/scylla_django/task/?q=worker-7",
        "filtered (owner matching nothing)": "/admin/scylla_django/task/?owner=worker-999",
        "filtered (status=expired)": "/admin/scylla_django/task/?status=expired",
        "task detail": f"/admin/scylla_django/task/{task.pk}/change/",
        "dashboard": "/admin/scylla_django/task/dashboard/",
        "sorted by rn": "/admin/scylla_django/task/?o=-1",
        "bulk purge count": "/admin/scylla_django/task/purge/?older_than_days=10"
        "&statuses=completed&statuses=aborted&statuses=cancelled",
    }
    queries = 0

    def count(execute: Callable[..., Any], *args: Any) -> Any:
        nonlocal queries
        queries += 1
        return execute(*args)

    print(f"{'page':40} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}")
    for name, url in pages.items():
        queries = 0
        with connection.execute_wrapper(count):
            assert client.get(url).status_code == 200, url
        p50, p95 = timed(requests, partial(status_of, client, url))
        print(f"{name:40} {p50:8.1f} {p95:8.1f} {queries:8}")


def time_purge() -> None:
    """Purge the terminal tasks older than 10 days, as `scylla_cleanup --older-than 10d`."""
    from scylla_django.models import Task

    batches = 0

    def count_batch(deleted: int) -> None:
        nonlocal batches
        batches += 1

    started = time.perf_counter()
    deleted = Task.objects.purge(older_than=timedelta(days=10), on_batch=count_batch)
    elapsed = time.perf_counter() - started
    print(
        f"purge: {deleted:,} tasks (and their History) in {elapsed:.1f} s, {batches} batches, "
        f"{deleted / elapsed:,.0f} tasks/s"
    )


if __name__ == "__main__":
    main()
