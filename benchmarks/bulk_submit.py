"""A bulk submission's insert on PostgreSQL: one statement per chunk (what `submit_many` does)
beside COPY, and beside pgbench's server-side insert of as many rows.

    PYTHONPATH=. python benchmarks/bulk_submit.py [--tasks 50000] [--batch 1000] [--samples 3]

Into the database named by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
scylla_bench_bulk, created and migrated if missing; emptied first) it inserts `--tasks`
validated tasks, `--batch` per transaction, by each way in turn (the order rotates from one
sample to the next), each on emptied tables:

- statements: `inserts.postgresql_submit_many`, as `submit_many` calls it: a pipeline of
  `INSERT … SELECT … FROM jsonb_to_recordset(…) ON CONFLICT (rn) DO NOTHING RETURNING rn`,
  one statement per `inserts.SUBMIT_CHUNK` tasks, each notifying the queues it made ready;
- copy + insert: what COPY would have to do to give the same answers: COPY the batch into a
  temporary table, then one `INSERT … SELECT … ON CONFLICT (rn) DO NOTHING RETURNING rn` from
  it with the same notification (COPY itself cannot skip a duplicate rn, nor say which rows it
  wrote);
- bare copy: COPY straight into the task table, nothing skipped, nothing returned, nothing
  notified: the floor of any COPY-based way, not a way `submit_many` could take;
- `submit_many()`: the whole call, with its validation and its per-item outcomes.

The items are validated once, before the timings (`inputs.task_values`), for the first three.
Each line gives tasks/s (median of `--samples` [min-max]) and the client's CPU per task. Beside
them, pgbench runs one transaction per batch that inserts `--batch` rows generated on the server
(`INSERT … SELECT … FROM generate_series`) into a copy of the task table with the same indexes:
no client, no parameters, the server's own limit for inserting those rows.
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_bulk"
STAGING = "scylla_bench_staging"
PGBENCH_TABLE = "pgbench_bulk_task"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=50_000, help="tasks per run")
    parser.add_argument("--batch", type=int, default=1000, help="tasks per transaction")
    parser.add_argument("--samples", type=int, default=3, help="runs of each way")
    args = parser.parse_args()
    postgres.setup(parser, DEFAULT_URL)
    # Nothing serves the benchmark's queues: the warning of each submission would fill the page.
    logging.getLogger("scylla_django").setLevel(logging.ERROR)

    from django.db import connection, transaction

    from scylla_django import db
    from scylla_django.db import inserts
    from scylla_django.models import Task
    from scylla_django.models.inputs import task_values

    submission = inserts._submission(Task, connection.alias)
    columns = [f.attname for f in submission.given]
    quote = connection.ops.quote_name
    tasks = Task.objects.all()

    def items(sample: int, start: int, size: int) -> list[dict[str, Any]]:
        return [
            {"queue": f"q{n % 10}", "spec": {"n": n}, "rn": f"b{sample}-{n}"}
            for n in range(start, start + size)
        ]

    def validated(sample: int) -> list[list[dict[str, Any]]]:
        return [
            [task_values(**item) for item in items(sample, start, size)]
            for start, size in batches(args.tasks, args.batch)
        ]

    def empty() -> None:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE scylla_django_history, scylla_django_task RESTART IDENTITY")
            cursor.execute("CHECKPOINT")

    others = [
        f
        for f in Task._meta.concrete_fields
        if f.attname not in columns
        and not f.primary_key
        and f.attname not in ("created", "updated")
    ]
    every = columns + [f.attname for f in others]
    fixed = [copy_value(f.get_default()) for f in others]
    missing = {f.attname: f.get_default() for f in submission.given}  # as postgresql_submit

    def copy_rows(
        cursor: Any, table: str, names: list[str], rows: Sequence[dict[str, Any]]
    ) -> None:
        listed = ", ".join(quote(c) for c in names)
        extra = fixed if len(names) > len(columns) else []
        with cursor.cursor.copy(f"COPY {table} ({listed}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([*(copy_value(row.get(c, missing[c])) for c in columns), *extra])

    record = ", ".join(f"{quote(c)} {inserts.SUBMITTED[c]}" for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGING} ({record}) ON COMMIT DELETE ROWS"
        )
    # submit_many's own statement, reading the staged rows instead of a JSON document.
    moved = re.sub(
        r"FROM jsonb_to_recordset\(%s::jsonb\) AS r\(.*?\) ON CONFLICT",
        f"FROM {STAGING} AS r ON CONFLICT",
        submission.many,
        count=1,
        flags=re.S,
    )
    assert moved != submission.many

    def by_statements(chunks: list[list[dict[str, Any]]]) -> None:
        for chunk in chunks:
            inserted = inserts.postgresql_submit_many(
                tasks,
                (
                    chunk[i : i + inserts.SUBMIT_CHUNK]
                    for i in range(0, len(chunk), inserts.SUBMIT_CHUNK)
                ),
            )
            assert len(inserted) == len(chunk)

    def by_copy_and_insert(chunks: list[list[dict[str, Any]]]) -> None:
        for chunk in chunks:
            with transaction.atomic(), connection.cursor() as cursor:
                copy_rows(cursor, STAGING, columns, chunk)
                cursor.execute(moved, [db.READY_CHANNEL])
                assert len(cursor.fetchall()) == len(chunk)

    def by_bare_copy(chunks: list[list[dict[str, Any]]]) -> None:
        for chunk in chunks:
            with transaction.atomic(), connection.cursor() as cursor:
                copy_rows(cursor, "scylla_django_task", every, chunk)

    def by_submit_many(sample: int) -> None:
        for start, size in batches(args.tasks, args.batch):
            outcomes = Task.objects.submit_many(items(sample, start, size))
            assert all(o.outcome == "inserted" for o in outcomes)

    ways: list[tuple[str, Callable[[int], Callable[[], None]]]] = [
        ("statements (submit_many's insert)", lambda s: prepared(by_statements, validated(s))),
        ("copy + insert from it", lambda s: prepared(by_copy_and_insert, validated(s))),
        ("bare copy (no duplicate check)", lambda s: prepared(by_bare_copy, validated(s))),
        ("submit_many() whole call", lambda s: lambda: by_submit_many(s)),
    ]
    rates: dict[str, list[float]] = {name: [] for name, _ in ways}
    cpus: dict[str, list[float]] = {name: [] for name, _ in ways}
    limits: list[float] = []
    create_pgbench_table()
    script = pgbench_script(args.batch)
    postgres.print_machine()
    print(f"{args.tasks:,} tasks, {args.batch:,} per transaction, {args.samples} samples")
    for sample in range(args.samples):
        order = ways[sample % len(ways) :] + ways[: sample % len(ways)]
        for name, make in order:
            empty()
            run = make(sample)
            started, cpu = time.perf_counter(), time.process_time()
            run()
            rates[name].append(args.tasks / (time.perf_counter() - started))
            cpus[name].append((time.process_time() - cpu) / args.tasks * 1e6)
        empty_pgbench()
        tps, _ = postgres.pgbench(script, transactions=max(1, args.tasks // args.batch))
        limits.append(tps * args.batch)
    limit = statistics.median(limits)
    for name, _ in ways:
        rate = statistics.median(rates[name])
        print(
            f"{name:<36} {rate:>9,.0f} [{min(rates[name]):,.0f}-{max(rates[name]):,.0f}] "
            f"tasks/s, ratio {rate / limit:.2f}; client CPU {statistics.median(cpus[name]):5.1f} "
            "µs per task"
        )
    print(
        f"{'pgbench, rows made on the server':<36} {limit:>9,.0f} "
        f"[{min(limits):,.0f}-{max(limits):,.0f}] tasks/s"
    )


def batches(total: int, size: int) -> list[tuple[int, int]]:
    """(start, size) of each batch of `total` tasks, `size` at most."""
    return [(start, min(size, total - start)) for start in range(0, total, size)]


def prepared(run: Callable[[Any], None], argument: Any) -> Callable[[], None]:
    """`run(argument)` as a call of no argument (the argument made before the timing)."""
    return lambda: run(argument)


def copy_value(value: Any) -> Any:
    """A validated value as COPY's text format takes it (JSON documents as their text)."""
    import json
    from datetime import timedelta

    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, timedelta):
        return f"{value // timedelta(microseconds=1)} microseconds"
    return value


def create_pgbench_table() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {PGBENCH_TABLE}")
        cursor.execute(f"CREATE TABLE {PGBENCH_TABLE} (LIKE scylla_django_task INCLUDING ALL)")


def empty_pgbench() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {PGBENCH_TABLE}")
        cursor.execute("CHECKPOINT")


def pgbench_script(batch: int) -> str:
    """One transaction: `batch` ready tasks made on the server, with new rns."""
    return (
        f"\\set base random(1, 1000000000)\n"
        f"INSERT INTO {PGBENCH_TABLE} (rn, queue, spec, priority, status, progress, errors, "
        "leases, attempt, snoozes, created, updated, order_block) "
        f"SELECT 'g' || :base || '-' || g, 'q' || (g % 10), jsonb_build_object('n', g), 0, "
        "'ready', 0, '[]', 0, 1, 0, now(), now(), false "
        f"FROM generate_series(1, {batch}) AS g;\n"
    )


if __name__ == "__main__":
    main()
