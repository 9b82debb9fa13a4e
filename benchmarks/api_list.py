"""Time the REST API's task list on a large PostgreSQL table.

    PYTHONPATH=. python benchmarks/api_list.py [--tasks 100000] [--requests 50] [--explain]

Seeds `--tasks` tasks (80% terminal, 15% ready, 5% running, over 10 queues and 10 days, with
their History) into the database named by DATABASE_URL (default postgres://postgres@127.0.0.1:
5432/scylla_bench_api, created if missing), after migrating it. Then it sends each request
`--requests` times through Django's test client with a token, as a user allowed to view tasks,
and prints p50/p95 server times in ms and the queries per request. `--explain` also prints the
plan of each list query.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any
from urllib.parse import urlsplit

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_api"
QUEUES = 10
API = "/api/scylla"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks to seed")
    parser.add_argument("--requests", type=int, default=50, help="requests of each kind")
    parser.add_argument("--no-seed", action="store_true", help="time the existing rows")
    parser.add_argument("--explain", action="store_true", help="print the list queries' plans")
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)

    if not args.no_seed:
        started = time.perf_counter()
        seed(args.tasks)
        print(f"seeded {args.tasks:,} tasks in {time.perf_counter() - started:.1f} s")
    time_requests(args.requests, args.explain)


def seed(n: int) -> None:
    """Replace all tasks and History with `n` generated tasks (one INSERT … SELECT each)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE scylla_django_history, scylla_django_task RESTART IDENTITY")
        cursor.execute(
            """
            INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress, created,
                updated, not_before, errors, result, owner, deadline, leases, attempt, snoozes)
            SELECT 'bench-' || g, 'q' || (g %% %(queues)s),
                jsonb_build_object('n', g, 'payload', repeat('x', 100)), (g * 31) %% 256,
                s.status, CASE s.status WHEN 'completed' THEN 1.0 ELSE 0.0 END,
                s.created, s.created + (g %% 600) * interval '1 second', NULL, '[]'::jsonb,
                CASE s.status WHEN 'completed' THEN '{"ok": true}'::jsonb END,
                CASE WHEN s.status IN ('ready', 'cancelled') THEN NULL
                    ELSE 'worker-' || (1 + g %% 20) END,
                CASE s.status WHEN 'running' THEN now() + interval '30 seconds' END,
                CASE s.status WHEN 'ready' THEN 0 ELSE 1 END, 0, 0
            FROM generate_series(1, %(n)s) AS g
            CROSS JOIN LATERAL (
                SELECT now() - interval '10 days' + g * interval '10 days' / %(n)s AS created,
                    CASE WHEN g %% 20 = 0 THEN 'running'
                        WHEN g %% 20 < 4 THEN 'ready'
                        WHEN g %% 20 < 17 THEN 'completed'
                        WHEN g %% 20 < 19 THEN 'aborted'
                        ELSE 'cancelled' END AS status
            ) AS s
            """,
            {"n": n, "queues": QUEUES},
        )
        cursor.execute(
            """
            INSERT INTO scylla_django_history (task_id, typ, worker, progress, time)
            SELECT id, 'TaskAssignment', owner, NULL, created + interval '1 second'
            FROM scylla_django_task WHERE owner IS NOT NULL
            UNION ALL
            SELECT id, CASE status WHEN 'completed' THEN 'TaskCompletion' ELSE 'TaskAbort' END,
                owner, progress, updated
            FROM scylla_django_task WHERE status IN ('completed', 'aborted')
            ORDER BY 1
            """
        )
        cursor.execute("VACUUM ANALYZE scylla_django_task, scylla_django_history")


def time_requests(count: int, explain: bool) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from rest_framework.authtoken.models import Token

    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username="bench-api")
    user.user_permissions.add(Permission.objects.get(codename="view_task"))
    token, _ = Token.objects.get_or_create(user=user)
    client = Client(HTTP_AUTHORIZATION=f"Token {token.key}")

    def get(url: str) -> Any:
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{url}: HTTP {response.status_code} {response.content[:200]!r}")
        return response.json()

    def next_of(url: str) -> str:
        parts = urlsplit(get(url)["next"])
        return f"{parts.path}?{parts.query}"

    requests = {
        "first page (-created)": f"{API}/tasks/",
        "status=running&queue=q3": f"{API}/tasks/?status=running&queue=q3",
        "ordering=-priority": f"{API}/tasks/?ordering=-priority",
        "status=ready&queue=q3&ordering=-priority": (
            f"{API}/tasks/?status=ready&queue=q3&ordering=-priority"
        ),
        "owner=worker-7": f"{API}/tasks/?owner=worker-7",
        "page_size=500": f"{API}/tasks/?page_size=500",
    }
    requests["next page (-created)"] = next_of(requests["first page (-created)"])
    requests["next page (-priority)"] = next_of(requests["ordering=-priority"])
    deep = requests["first page (-created)"]
    for _ in range(20):
        deep = next_of(deep)
    requests["21st page (-created)"] = deep
    requests["task detail"] = f"{API}/tasks/bench-{task_count() // 2}/"
    requests["queues"] = f"{API}/queues/"

    print(f"{'request':44} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}")
    for name, url in requests.items():
        get(url)  # warm up
        times = []
        for _ in range(count):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                get(url)
                times.append((time.perf_counter() - started) * 1000)
        times.sort()
        p95 = times[min(len(times) - 1, round(0.95 * len(times)) - 1)]
        print(f"{name:44} {statistics.median(times):8.1f} {p95:8.1f} {len(queries):8}")
        if explain and ("/tasks/?" in url or url.endswith("/tasks/")):
            print_plan(queries.captured_queries[-1]["sql"])


def task_count() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scylla_django_task")
        (count,) = cursor.fetchone()
    return int(count)


def print_plan(sql: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
        for (line,) in cursor.fetchall():
            print("    " + line)


if __name__ == "__main__":
    main()
