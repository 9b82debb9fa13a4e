"""Time the monitor's lease reset after a fleet-wide stop: `Task.objects.reset_expired()` over
N expired leases, half of them given back (a TaskYield as their last History row).

    PYTHONPATH=. python benchmarks/lease_reset.py [--tasks 100000] [--runs 1] [--chunk-size N]

Seeds `--tasks` running tasks (10 queues, held by 10 workers, each with its TaskAssignment
History row) whose leases all expired a minute ago; every second one was yielded (its deadline
a second before its `updated`, and a TaskYield row after its assignment, as a worker's
shutdown leaves it), into the database named by DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/scylla_bench_reset, created if missing). Then it times one
`reset_expired()` call that makes them all ready again, checks what it wrote (every task
ready, one TaskTimeout per task that was not yielded, none for the others) and prints the
resets per second: once with the receivers of `task_reset` and `task_finished` this process
has (the Prometheus counters, `scylla_django.metrics`, when prometheus_client is installed:
each reset task is then read back and sent with its signal), once more, on a fresh seed,
with none. Beside it, pgbench runs one plain UPDATE of the same rows' status, owner
and deadline (rolled back): the floor of any reset that writes them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_reset"
QUEUES = 10
WORKERS = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="expired leases to seed")
    parser.add_argument("--runs", type=int, default=1, help="seed and reset this many times")
    parser.add_argument(
        "--chunk-size", type=int, default=None, help="leases per transaction (RESET_CHUNK_SIZE)"
    )
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)
    postgres.print_machine()
    times = []
    for _ in range(args.runs):
        for receivers in (True, False):
            postgres.seed_timed(seed, args.tasks)
            times.append(time_reset(args.tasks, args.chunk_size, receivers))
    if args.runs > 1:
        print(f"median of {args.runs}, with receivers: {statistics.median(times[::2]):.2f} s")
        print(f"median of {args.runs}, without: {statistics.median(times[1::2]):.2f} s")
    time_pgbench()


def seed(n: int) -> None:
    """Replace all tasks, History and workers with `n` running tasks whose leases expired a
    minute ago, every second one yielded."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_worker "
            "RESTART IDENTITY"
        )
        # Yielded (even g): deadline a second before updated, as `yield_lease` writes them.
        # Expired (odd g): last heartbeat 4 minutes ago, deadline a minute ago.
        cursor.execute(
            """
            INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress, created,
                updated, errors, owner, deadline, leases, attempt, snoozes, lease_length)
            SELECT 'reset-' || g, 'q' || (g %% %(queues)s), jsonb_build_object('n', g), 0,
                'running', (g %% 100) / 100.0, now() - interval '1 hour',
                CASE WHEN g %% 2 = 0 THEN now() - interval '59 seconds'
                     ELSE now() - interval '4 minutes' END,
                '[]'::jsonb, 'worker-' || (1 + g %% %(workers)s),
                now() - interval '1 minute', 1, 1, 0, interval '3 minutes'
            FROM generate_series(1, %(n)s) AS g
            """,
            {"n": n, "queues": QUEUES, "workers": WORKERS},
        )
        cursor.execute(
            """
            INSERT INTO scylla_django_history (task_id, typ, worker, progress, time)
            SELECT id, typ, owner, progress, time FROM (
                SELECT id, 1 AS k, 'TaskAssignment' AS typ, owner, NULL::double precision
                    AS progress, created AS time FROM scylla_django_task
                UNION ALL
                SELECT id, 2, 'TaskYield', owner, progress, updated FROM scylla_django_task
                WHERE id % 2 = 0
            ) AS e
            ORDER BY id, k
            """
        )
        cursor.execute("VACUUM ANALYZE scylla_django_task, scylla_django_history")


def time_reset(n: int, chunk_size: int | None, receivers: bool) -> float:
    """Time one `reset_expired()` over the seeded leases (without `receivers`, with no
    receiver of the signals it sends connected), check what it wrote, print it."""
    from scylla_django import signals
    from scylla_django.models import History, Task

    sent = (signals.task_reset, signals.task_finished)
    saved = [signal.receivers[:] for signal in sent]
    if not receivers:
        for signal in sent:
            signal.receivers.clear()
            signal.sender_receivers_cache.clear()
    try:
        started = time.perf_counter()
        done = Task.objects.reset_expired(chunk_size=chunk_size)
        elapsed = time.perf_counter() - started
    finally:
        for signal, kept in zip(sent, saved, strict=True):
            signal.receivers[:] = kept
            signal.sender_receivers_cache.clear()
    ready = Task.objects.filter(status="ready").count()
    timeouts = History.objects.filter(typ="TaskTimeout").count()
    assert done == n and ready == n, (done, ready)
    assert timeouts == n - n // 2, timeouts
    print(
        f"reset_expired(), {'with' if receivers else 'without'} receivers: {n:,} leases "
        f"({n // 2:,} yielded) in {elapsed:.2f} s, "
        f"{n / elapsed:,.0f} a second",
        flush=True,
    )
    return elapsed


def time_pgbench() -> None:
    """pgbench: one plain UPDATE of every seeded task's status, owner and deadline, rolled
    back (the same rows, indexes and triggers as the reset writes, without its fences,
    History or classification)."""
    import shutil

    if shutil.which("pgbench") is None:
        print("(pgbench is not on PATH: no pgbench figure)")
        return
    tps, latencies = postgres.pgbench(
        "BEGIN;\n"
        "UPDATE scylla_django_task SET status = 'running', owner = 'worker-1', "
        "deadline = now() - interval '1 minute' WHERE status = 'ready';\n"
        "ROLLBACK;\n",
        transactions=3,
    )
    print(
        f"pgbench, one UPDATE of the same rows (rolled back), 1 client: p50 "
        f"{statistics.median(latencies) / 1000:.2f} s ({tps:.2f} tps)"
    )


if __name__ == "__main__":
    main()
