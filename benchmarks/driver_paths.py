"""One statement of a worker's kind through each way of sending it: the worker's own cursor,
psycopg's connection, psycopg's asyncio connection (one statement at a time, and pipelined),
beside pgbench sending the same statement.

    PYTHONPATH=. python benchmarks/driver_paths.py [--statements 5000] [--rows 9] [--samples 3]

Into the database named by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
scylla_bench_driver, created and migrated if missing; emptied first) it submits `--rows` tasks,
then sends `--statements` times, one client, the statement that reads them back whole by key
(`SELECT <every column> FROM <task table> WHERE id = ANY($1)`: what a lease returns at the
defaults, about nine tasks per statement, without the lease's writes, so that what is measured
is the client's side and not the commit). Each way prepares it on the server and fetches its
rows as tuples:

- the worker's cursor: `db.prepared_cursor` on Django's connection, the cursor a worker sends
  its lease, outcome and heartbeat statements through;
- psycopg: a connection of its own, `execute(…, prepare=True)`;
- psycopg async: an `AsyncConnection`, each statement awaited before the next is sent (as an
  event loop that owns the worker's one connection would send them);
- psycopg async, pipelined: the same, with up to 8 statements in flight in pipeline mode (the
  most an event loop could overlap: statements that do not depend on one another, such as
  heartbeats beside an outcome's write);
- pgbench: the same statement, prepared, one client (`-M prepared -c 1`).

Each line gives statements/s (median of `--samples` [min-max]) and the client's CPU per
statement (the process's CPU time over the run, divided by the statements).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import time
from collections.abc import Callable

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_driver"
PIPELINE_DEPTH = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--statements", type=int, default=5_000, help="statements per run")
    parser.add_argument("--rows", type=int, default=9, help="tasks each statement reads")
    parser.add_argument("--samples", type=int, default=3, help="runs of each way")
    args = parser.parse_args()
    postgres.setup(parser, DEFAULT_URL)
    # Nothing serves the benchmark's queue: no warning per submission.
    logging.getLogger("scylla_django").setLevel(logging.ERROR)

    import psycopg
    from django.db import connection

    from scylla_django.db import prepared_cursor
    from scylla_django.models import Task

    Task.objects.all().delete()
    Task.objects.submit_many(
        [{"queue": "bench-driver", "spec": {"n": n}} for n in range(args.rows)]
    )
    pks = list(Task.objects.values_list("pk", flat=True))  # the table holds only these
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in Task._meta.concrete_fields)
    statement = f"SELECT {columns} FROM {quote(Task._meta.db_table)} WHERE id = ANY(%s)"
    url = os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
    n = args.statements

    def worker_cursor() -> None:
        for _ in range(n):
            with prepared_cursor(connection) as cursor:
                cursor.execute(statement, [pks])
                rows = cursor.fetchall()
        assert len(rows) == args.rows

    # The bare connections load values as Django's does (its loaders: JSON left as text for
    # the fields to decode, its time zones), so that every way does the same work per row.
    connection.ensure_connection()
    adapters = connection.connection

    def sync_psycopg() -> None:
        with psycopg.connect(url, autocommit=True, context=adapters) as conn:
            for _ in range(n):
                rows = conn.execute(statement, [pks], prepare=True).fetchall()
        assert len(rows) == args.rows

    async def one_at_a_time() -> None:
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, context=adapters
        ) as conn:
            for _ in range(n):
                cursor = await conn.execute(statement, [pks], prepare=True)
                rows = await cursor.fetchall()
        assert len(rows) == args.rows

    async def pipelined() -> None:
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, context=adapters
        ) as conn:
            for start in range(0, n, PIPELINE_DEPTH):
                async with conn.pipeline():
                    cursors = [
                        await conn.execute(statement, [pks], prepare=True)
                        for _ in range(min(PIPELINE_DEPTH, n - start))
                    ]
                for cursor in cursors:
                    rows = await cursor.fetchall()
        assert len(rows) == args.rows

    ways: list[tuple[str, Callable[[], None]]] = [
        ("the worker's cursor (Django's connection)", worker_cursor),
        ("psycopg", sync_psycopg),
        ("psycopg async, one at a time", lambda: asyncio.run(one_at_a_time())),
        (
            f"psycopg async, pipelined ({PIPELINE_DEPTH} in flight)",
            lambda: asyncio.run(pipelined()),
        ),
    ]
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in ways}
    for sample in range(args.samples):
        # The order rotates from one sample to the next: no way always runs first.
        for name, way in ways[sample % len(ways) :] + ways[: sample % len(ways)]:
            figures[name].append(timed(way, n))

    # pgbench sends the same statement, its keys written in (pgbench binds only numbers).
    keys = "'{" + ",".join(map(str, pks)) + "}'::bigint[]"
    pgbench_script = statement.replace("%s", keys) + ";\n"
    limits = [postgres.pgbench(pgbench_script, transactions=n)[0] for _ in range(args.samples)]
    limit = statistics.median(limits)

    postgres.print_machine()
    print(f"{n:,} statements per run, {args.rows} tasks read by each, median of {args.samples}")
    for name, _ in ways:
        rates = [rate for rate, _ in figures[name]]
        cpu = statistics.median(cpu for _, cpu in figures[name])
        print(
            f"{name:<46} {postgres.spread(rates):>24} statements/s, client CPU {cpu:5.1f} µs each"
            f"  | ratio to pgbench {statistics.median(rates) / limit:.2f}"
        )
    print(f"{'pgbench, prepared, 1 client':<46} {postgres.spread(limits):>24} statements/s")


def timed(way: Callable[[], None], statements: int) -> tuple[float, float]:
    """Run `way`: its statements/s and the client's CPU µs per statement."""
    cpu, wall = time.process_time(), time.perf_counter()
    way()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return statements / wall, cpu / statements * 1e6


if __name__ == "__main__":
    main()
