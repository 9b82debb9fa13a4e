"""Keys on PostgreSQL: lease latency and drain throughput with one lock per task, and submit
with a unique key, each beside the same workload without keys and beside pgbench on the same
server in the same run.

    PYTHONPATH=. python benchmarks/lease_keys.py [--tasks 200000] [--keys 10000] [--leases 200]
        [--seconds 5] [--submits 1000] [--runs 3]

It replaces every task of the database named by DATABASE_URL (default postgres://postgres@
127.0.0.1:5432/scylla_bench_keys, created if missing) with `--tasks` ready tasks in queue `k`,
each holding one exclusive lock among `--keys` (`locks=["key-<n>"]`, interleaved), and as many
without keys in queue `p`; pgbench works on copies of the task and History tables (columns,
indexes, checks; no trigger) holding the same backlog. Each figure is the median of `--runs`
runs, the runs of a figure and of its pgbench interleaved:

- lease: `--leases` calls of `lease(limit=1)` and of `lease(limit=10)` by one worker, client
  side, round trip and commit included (each leased task put back to ready after its call,
  outside the timing, so the backlog stays the same); p50 and p99. pgbench: the same lease in
  SQL (SELECT … FOR UPDATE SKIP LOCKED + UPDATE + History INSERT, one transaction), one client.
- drain: one process leasing 10 and finishing them in one `finish_many()` call, for
  `--seconds`; tasks/s. pgbench: lease 10, then complete them (fenced UPDATE + History
  INSERT), one client.
- submit: `--submits` calls of `submit()`, then as many of `submit(unique_key=<new key>)`;
  tasks/s. pgbench: a one-row INSERT per transaction, one client.

"ratio" is the figure over pgbench's (for latencies, pgbench's over the figure: 1.0 is the
machine's limit); "keys/no keys" compares the two queues (the targets: drain ≥ 0.7, submit
≥ 0.8).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_keys"

LEASE_SQL = """\
BEGIN;
WITH picked AS (
  SELECT id FROM pgbench_keys_task
  WHERE status = 'ready' AND queue = '{queue}' AND (not_before IS NULL OR not_before <= now())
  ORDER BY priority DESC, created, id LIMIT {limit} FOR UPDATE SKIP LOCKED
), leased AS (
  UPDATE pgbench_keys_task t SET status = 'running', owner = 'pgbench',
    deadline = now() + interval '60 seconds', leases = t.leases + 1, updated = now()
  FROM picked WHERE t.id = picked.id RETURNING t.id
)
INSERT INTO pgbench_keys_history (task_id, typ, worker, time)
SELECT id, 'TaskAssignment', 'pgbench', now() FROM leased;
COMMIT;
"""

DRAIN_SQL = """\
BEGIN;
WITH picked AS (
  SELECT id FROM pgbench_keys_task
  WHERE status = 'ready' AND queue = 'k' AND (not_before IS NULL OR not_before <= now())
  ORDER BY priority DESC, created, id LIMIT 10 FOR UPDATE SKIP LOCKED
), leased AS (
  UPDATE pgbench_keys_task t SET status = 'running', owner = 'pgbench',
    deadline = now() + interval '60 seconds', leases = t.leases + 1, updated = now()
  FROM picked WHERE t.id = picked.id RETURNING t.id
), assigned AS (
  INSERT INTO pgbench_keys_history (task_id, typ, worker, time)
  SELECT id, 'TaskAssignment', 'pgbench', now() FROM leased
)
SELECT array_agg(id) AS ids FROM leased \\gset
COMMIT;
BEGIN;
WITH done AS (
  UPDATE pgbench_keys_task SET status = 'completed', progress = 1, deadline = NULL,
    result = 'null', updated = now()
  WHERE id = ANY(:ids::bigint[]) AND status = 'running' AND owner = 'pgbench' RETURNING id
)
INSERT INTO pgbench_keys_history (task_id, typ, worker, progress, time)
SELECT id, 'TaskCompletion', 'pgbench', 1, now() FROM done;
COMMIT;
"""

INSERT_SQL = """\
INSERT INTO pgbench_keys_task (rn, queue, spec, priority, status, progress, created, updated,
  errors, leases, attempt, snoozes)
VALUES (gen_random_uuid()::text, 's', '{"n": 1}', 0, 'ready', 0, now(), now(), '[]', 0, 1, 0);
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200_000, help="ready tasks per queue")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct locks in queue k")
    parser.add_argument("--leases", type=int, default=200, help="timed leases per run")
    parser.add_argument("--seconds", type=float, default=5.0, help="drain time per run")
    parser.add_argument("--submits", type=int, default=1000, help="submits per run")
    parser.add_argument("--runs", type=int, default=3, help="runs of each figure")
    args = parser.parse_args()
    if min(args.tasks, args.keys, args.leases, args.submits, args.runs) < 1:
        parser.error("--tasks, --keys, --leases, --submits and --runs must be positive")

    postgres.setup(parser, DEFAULT_URL)
    import django
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        (version,) = cursor.fetchone() or ("?",)
    load = " ".join(f"{n:.1f}" for n in os.getloadavg())
    print(
        f"{os.cpu_count()} CPUs, load average {load}, PostgreSQL {version}, "
        f"Django {django.get_version()}; median of {args.runs} runs"
    )
    seed(args.tasks, args.keys)
    print(f"{'lease':<22} {'p50 ms':>8} {'p99 ms':>8} {'pgbench p99':>12} {'ratio':>6}")
    p99s: dict[tuple[str, int], float] = {}
    for limit in (1, 10):
        for queue, label in (("p", "no keys"), ("k", "1 lock/task")):
            p50s, runs_p99, bench_p99 = [], [], []
            for _ in range(args.runs):
                times = time_leases(queue, limit, args.leases)
                p50s.append(statistics.median(times))
                runs_p99.append(percentile(times, 99))
                _, latencies = postgres.pgbench(
                    LEASE_SQL.format(queue=queue, limit=limit), transactions=args.leases
                )
                bench_p99.append(percentile(latencies, 99))
            p99, limit_p99 = statistics.median(runs_p99), statistics.median(bench_p99)
            p99s[queue, limit] = p99
            print(
                f"{label + f', limit {limit}':<22} {statistics.median(p50s):>8.2f} "
                f"{p99:>8.2f} {limit_p99:>12.2f} {limit_p99 / p99:>6.2f}",
                flush=True,
            )
    for limit in (1, 10):
        ratio = p99s["k", limit] / p99s["p", limit]
        print(f"lease p99 with keys / without, limit {limit}: {ratio:.2f}")

    drains: dict[str, list[float]] = {q: [] for q in ("p", "k", "pgbench")}
    for _ in range(args.runs):
        drains["p"].append(drain("p", args.seconds))
        drains["k"].append(drain("k", args.seconds))
        tps, _ = postgres.pgbench(DRAIN_SQL, seconds=args.seconds)
        drains["pgbench"].append(tps * 10)
    compare("drain (lease 10 + finish_many)", drains["p"], drains["k"], drains["pgbench"])

    submits: dict[str, list[float]] = {q: [] for q in ("plain", "unique", "pgbench")}
    for run in range(args.runs):
        submits["plain"].append(rate(args.submits, lambda n, r=run: submit(f"p{r}-{n}")))
        submits["unique"].append(
            rate(args.submits, lambda n, r=run: submit(f"u{r}-{n}", unique_key=f"u{r}:{n}"))
        )
        tps, _ = postgres.pgbench(INSERT_SQL, transactions=args.submits)
        submits["pgbench"].append(tps)
    compare("submit, one per call", submits["plain"], submits["unique"], submits["pgbench"])


def compare(what: str, plain: list[float], keyed: list[float], limit: list[float]) -> None:
    """Print the medians of a figure without and with keys, beside pgbench's."""
    p, k, b = (statistics.median(x) for x in (plain, keyed, limit))
    print(
        f"{what}: no keys {p:,.0f} tasks/s (ratio {p / b:.2f}), with keys {k:,.0f} tasks/s "
        f"(ratio {k / b:.2f}); pgbench {b:,.0f}/s; keys/no keys {k / p:.2f}",
        flush=True,
    )


def percentile(values: list[float], n: int) -> float:
    return statistics.quantiles(values, n=100)[n - 1]


def rate(count: int, call: Callable[[int], object]) -> float:
    started = time.perf_counter()
    for n in range(count):
        call(n)
    return count / (time.perf_counter() - started)


def submit(rn: str, **options: object) -> None:
    from scylla_django.models import Task

    Task.objects.submit("s", {"n": 1}, rn=rn, **options)


def seed(n: int, keys: int) -> None:
    """Replace all tasks, History, workers and key rows with `n` ready tasks with one lock each
    in queue k (over `keys` locks) and `n` without keys in queue p; and the same backlog in
    pgbench's copies of the tables."""
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
                updated, errors, leases, attempt, snoozes, keys)
            SELECT q || '-' || g, q, '{}'::jsonb, 0, 'ready', 0,
                now() - make_interval(secs => (%s - g) / 1000.0), now(), '[]', 0, 1, 0,
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
        cursor.execute("DROP TABLE IF EXISTS pgbench_keys_history, pgbench_keys_task")
        cursor.execute("CREATE TABLE pgbench_keys_task (LIKE scylla_django_task INCLUDING ALL)")
        cursor.execute(
            "CREATE TABLE pgbench_keys_history (LIKE scylla_django_history INCLUDING ALL)"
        )
        cursor.execute("INSERT INTO pgbench_keys_task SELECT * FROM scylla_django_task")
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('pgbench_keys_task', 'id'), max(id)) "
            "FROM pgbench_keys_task"
        )
        for table in ("scylla_django_task", "scylla_django_key", "pgbench_keys_task"):
            cursor.execute(f"VACUUM ANALYZE {table}")
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
