"""Submission rates on PostgreSQL: `submit()` one task per call, and `submit_many()` in batches.

    PYTHONPATH=. python benchmarks/submit.py [--tasks 5000] [--bulk 100000] [--batch 5000]

`submit()` is also timed with a unique key (a new key per task: the insert path), in the same
samples as the plain one and right after it, and with one key for every call (after the
first, the "return the holder" path); each is printed beside the plain rate as a ratio.
Uses the database named by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
scylla_bench_submit, created if missing), emptied first. One client, autocommit, so each
`submit()` is one round trip; `submit_many()` is timed with validation and per-item outcomes
included. Prints tasks per second for each, the median of `--samples` runs, beside the rate
of a plain one-row INSERT per statement on the same connection, and the client's CPU time per
call and per task.

The floor of one submission per call: the same one-row INSERT, one per transaction, through
Django's cursor, through psycopg's own connection (a prepared statement), and through pgbench
(`-M prepared`, 1 client), each in every sample; printed as ratios to pgbench's, beside
`submit()`'s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import postgres  # benchmarks/postgres.py, beside this script
import psycopg

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_submit"

# The plain INSERT of `main()`, with the rn made on the server.
PGBENCH_INSERT = """\
INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress, errors, leases,
  attempt, snoozes)
VALUES (gen_random_uuid()::text, 'bench', '{}', 0, 'ready', 0, '[]', 0, 0, 0);
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000, help="single submissions per run")
    parser.add_argument("--bulk", type=int, default=100_000, help="tasks per submit_many run")
    parser.add_argument("--batch", type=int, default=5000, help="items per submit_many call")
    parser.add_argument("--samples", type=int, default=3, help="runs of each")
    args = parser.parse_args()
    postgres.setup(parser, DEFAULT_URL)

    from django.db import connection

    from scylla_django.models import Task

    def empty() -> None:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE scylla_django_history, scylla_django_task RESTART IDENTITY")

    singles, single_cpu, plain, bulks, bulk_cpu = [], [], [], [], []
    driver, server = [], []
    keyed, keyed_cpu, held = [], [], []
    insert = (
        "INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress, errors,"
        " leases, attempt, snoozes) VALUES (%s, 'bench', '{}', 0, 'ready', 0, '[]', 0, 0, 0)"
    )
    for sample in range(args.samples):
        empty()
        started, cpu = time.perf_counter(), time.process_time()
        for n in range(args.tasks):
            Task.objects.submit("bench", {"n": n}, rn=f"s{sample}-{n}")
        singles.append(args.tasks / (time.perf_counter() - started))
        single_cpu.append((time.process_time() - cpu) / args.tasks * 1e6)

        empty()
        started, cpu = time.perf_counter(), time.process_time()
        for n in range(args.tasks):
            Task.objects.submit("bench", {"n": n}, rn=f"k{sample}-{n}", unique_key=f"key:{n}")
        keyed.append(args.tasks / (time.perf_counter() - started))
        keyed_cpu.append((time.process_time() - cpu) / args.tasks * 1e6)

        started = time.perf_counter()
        for n in range(args.tasks):
            Task.objects.submit("bench", {"n": n}, unique_key="key:0")
        held.append(args.tasks / (time.perf_counter() - started))

        empty()
        started = time.perf_counter()
        with connection.cursor() as cursor:
            for n in range(args.tasks):
                cursor.execute(insert, [f"p{sample}-{n}"])
        plain.append(args.tasks / (time.perf_counter() - started))

        empty()
        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as own:
            own.prepare_threshold = 0
            started = time.perf_counter()
            for n in range(args.tasks):
                own.execute(insert, [f"d{sample}-{n}"])
            driver.append(args.tasks / (time.perf_counter() - started))

        empty()
        server.append(postgres.pgbench(PGBENCH_INSERT, transactions=args.tasks)[0])

        empty()
        started, cpu = time.perf_counter(), time.process_time()
        for start in range(0, args.bulk, args.batch):
            items = [
                {"queue": f"q{n % 10}", "spec": {"n": n}, "rn": f"b{sample}-{n}"}
                for n in range(start, min(start + args.batch, args.bulk))
            ]
            outcomes = Task.objects.submit_many(items)
            assert all(o.outcome == "inserted" for o in outcomes)
        bulks.append(args.bulk / (time.perf_counter() - started))
        bulk_cpu.append((time.process_time() - cpu) / args.bulk * 1e6)
    single, baseline = statistics.median(singles), statistics.median(plain)
    print(
        f"submit, one per call: {single:,.0f} tasks/s; plain INSERT per statement: "
        f"{baseline:,.0f}/s; ratio {single / baseline:.2f}; "
        f"client CPU {statistics.median(single_cpu):.1f} µs per call"
    )
    floor = statistics.median(server)
    print(
        f"one-row INSERT, one per call: pgbench {floor:,.0f}/s; psycopg "
        f"{statistics.median(driver):,.0f}/s (ratio {statistics.median(driver) / floor:.2f}); "
        f"Django's cursor {baseline:,.0f}/s (ratio {baseline / floor:.2f}); submit() "
        f"{single:,.0f}/s (ratio {single / floor:.2f})"
    )
    with_key, returning = statistics.median(keyed), statistics.median(held)
    print(
        f"submit with a new unique key: {with_key:,.0f} tasks/s; ratio to submit "
        f"{with_key / single:.2f}; client CPU {statistics.median(keyed_cpu):.1f} µs per call"
    )
    print(
        f"submit of a held key (returns the holder): {returning:,.0f} calls/s; "
        f"ratio to submit {returning / single:.2f}"
    )
    print(
        f"submit_many, batches of {args.batch}: {statistics.median(bulks):,.0f} tasks/s; "
        f"client CPU {statistics.median(bulk_cpu):.1f} µs per task"
    )


if __name__ == "__main__":
    main()
