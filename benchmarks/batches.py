"""A batch of 100,000 tasks: its submission, the cost of finishing its tasks beside the same
tasks outside a batch, and the time its callback takes to be released once the last task
finished; beside pgbench updating one counter row on the same server.

    PYTHONPATH=. python benchmarks/batches.py [--tasks 100000] [--chunk 500]

It replaces every task of the database named by DATABASE_URL (default postgres://postgres@
127.0.0.1:5432/scylla_bench_batches, created if missing). Then, twice (`plain`: no batch;
`batch`: one batch with an `on_success` callback), it submits `--tasks` tasks with
`submit_many()` and finishes them all from one process, leasing `--chunk` at a time and
finishing them in one `finish_many()` call (the worker's batched finish); a batch's finishes
move its counters in the same statement. Last, it times one monitor pass of the callbacks
service (`release_callbacks()`) while the batch runs (nothing due: one read of the open batches)
and once every task finished (the release), and checks that the callback was released once.

With `--monitor` (the default) a real monitor runs beside the batch's finishes in a thread
(`Monitor(interval=--interval)`, its callbacks service only), as in production: the figure
is the callback's release time after the last finish, both read from the database clock (the
last task's `updated` and the callback's). It also counts the statements: those of each
`finish_many()` call (the same with or without a batch but for the one UPDATE of the batch's
counters) and those of a callbacks pass, none of which reads the batch's tasks (checked: no
statement of a pass names the task table's `batch_id`). `--only batch` skips the plain run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_batches"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks per run")
    parser.add_argument("--chunk", type=int, default=500, help="tasks leased and finished at once")
    parser.add_argument(
        "--interval", type=float, default=0.1, help="the monitor's interval, in seconds"
    )
    parser.add_argument("--only", choices=["plain", "batch"], help="one of the two runs only")
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)
    import django
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        (version,) = cursor.fetchone() or ("?",)
    print(f"{os.cpu_count()} CPUs, PostgreSQL {version}, Django {django.get_version()}")
    print(f"{args.tasks:,} tasks per run, leased and finished {args.chunk} at a time")
    for label, in_batch in (("plain", False), ("batch", True)):
        if args.only not in (None, label):
            continue
        submitted, finished, statements = run(args.tasks, args.chunk, in_batch)
        print(
            f"{label:>6}: submit {args.tasks / submitted:>9,.0f} tasks/s, "
            f"lease+finish {args.tasks / finished:>8,.0f} tasks/s "
            f"({finished / args.tasks * 1e6:.1f} µs a task), "
            f"{statements:.1f} statements per finish_many() of {args.chunk}"
        )
    if args.only in (None, "batch"):
        released, passes, pass_statements = released_by_monitor(
            args.tasks, args.chunk, args.interval
        )
        print(
            f"monitor (interval {args.interval:g} s) beside the finishes: on_success released "
            f"{released * 1e3:.0f} ms after the last finish (database clock), once; "
            f"{passes:,} callbacks passes, {pass_statements:.1f} statements each, "
            "none reading the batch's tasks"
        )
    rate = pgbench_counter()
    if rate is not None:
        print(f"pgbench, one counter row UPDATE per transaction, 1 client: {rate:,.0f} tps")


def reset_tables() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_worker, "
            "scylla_django_batch RESTART IDENTITY"
        )


def submit(n: int, in_batch: bool) -> Any:
    """Submit `n` tasks on `bench`, in one batch with an `on_success` callback or not; the
    batch row (or None)."""
    from django.db import connection

    from scylla_django.batches import Batch
    from scylla_django.models import Task

    items = ({"queue": "bench", "spec": {"n": i}} for i in range(n))
    row = None
    if in_batch:
        with Batch(on_success=("report", {"done": True})) as batch:
            batch.submit_many(items)
        row = batch.row
    else:
        Task.objects.submit_many(items)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scylla_django_task")
    return row


def run(n: int, chunk: int, in_batch: bool) -> tuple[float, float, float]:
    """Submit and finish `n` tasks; the seconds each took, and the statements per
    `finish_many()` call."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scylla_django.models import Outcome, Task, Worker

    reset_tables()
    worker = Worker.objects.register(queues=["bench", "report"], capacity=chunk, hostname="b")
    started = time.perf_counter()
    submit(n, in_batch)
    submitted = time.perf_counter() - started

    started = time.perf_counter()
    done = calls = statements = 0
    while leased := Task.objects.lease(worker, ["bench"], limit=chunk):
        outcomes = [
            Outcome(t.pk, t.leases, result={"n": t.spec["n"]}, duration=0.001) for t in leased
        ]
        with CaptureQueriesContext(connection) as queries:
            Task.objects.finish_many(worker, outcomes)
        calls += 1
        statements += len(queries.captured_queries)
        done += len(leased)
    finished = time.perf_counter() - started
    assert done == n, done
    return submitted, finished, statements / calls


def released_by_monitor(n: int, chunk: int, interval: float) -> tuple[float, int, float]:
    """Finish a batch of `n` tasks while a monitor runs its callbacks service every
    `interval`; the seconds from the last finish to the release (database clock), the passes
    made and the statements per pass. Checks the callback was released once and that no
    statement of a pass reads the batch's tasks."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from scylla_django.batches import release_callbacks
    from scylla_django.models import Batch as BatchRow
    from scylla_django.models import Outcome, Task, Worker
    from scylla_django.monitor import Monitor

    reset_tables()
    worker = Worker.objects.register(queues=["bench", "report"], capacity=chunk, hostname="b")
    row = submit(n, True)
    stop = threading.Event()
    monitor = Monitor(interval=interval)
    monitor.services = [monitor.callbacks]
    counts: list[int] = []
    released: list[int] = []

    def watch() -> None:
        try:
            with CaptureQueriesContext(connections["default"]) as queries:
                while not stop.is_set():
                    before = len(queries.captured_queries)
                    released.append(monitor.run_once().callbacks_released)
                    pass_queries = queries.captured_queries[before:]
                    counts.append(len(pass_queries))
                    for query in pass_queries:
                        sql = query["sql"]
                        assert not ("scylla_django_task" in sql and '"batch_id"' in sql), sql
                    stop.wait(interval)
        finally:
            connections.close_all()

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        while leased := Task.objects.lease(worker, ["bench"], limit=chunk):
            Task.objects.finish_many(
                worker,
                [
                    Outcome(t.pk, t.leases, result={"n": t.spec["n"]}, duration=0.001)
                    for t in leased
                ],
            )
        callback = Task.objects.filter(pk=row.on_success_id)
        deadline = time.monotonic() + 60
        while callback.filter(not_before__isnull=False).exists():
            assert time.monotonic() < deadline, "the callback was not released in 60 s"
            time.sleep(interval / 10)
    finally:
        stop.set()
        thread.join()
    assert sum(released) == 1, released
    assert release_callbacks().released == 0
    row = BatchRow.objects.get(pk=row.pk)
    assert (row.total, row.completed, row.failed) == (n, n, 0)
    last = Task.objects.filter(batch=row).order_by("-updated").values_list("updated", flat=True)[0]
    release = callback.values_list("updated", flat=True)[0]
    return (release - last).total_seconds(), len(counts), sum(counts) / max(1, len(counts))


def pgbench_counter(seconds: int = 5) -> float | None:
    """pgbench's transactions/s updating one counter row, as each finishing statement of a
    batch's tasks does (None when pgbench is not installed)."""
    if shutil.which("pgbench") is None:
        print("(pgbench is not on PATH: no pgbench figure)")
        return None
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS pgbench_scylla_counter")
        cursor.execute("CREATE TABLE pgbench_scylla_counter (id int PRIMARY KEY, n bigint)")
        cursor.execute("INSERT INTO pgbench_scylla_counter VALUES (1, 0)")
    settings = connection.settings_dict
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write("UPDATE pgbench_scylla_counter SET n = n + 1 WHERE id = 1;\n")
        script.flush()
        command = ["pgbench", "-n", "-M", "prepared", "-c", "1", "-T", str(seconds)]
        command += ["-f", script.name, "-h", settings["HOST"] or "127.0.0.1"]
        command += ["-p", str(settings["PORT"] or 5432), "-U", settings["USER"] or "postgres"]
        command.append(settings["NAME"])
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"pgbench failed:\n{done.stdout}\n{done.stderr}")
    for line in done.stdout.splitlines():
        if line.startswith("tps = "):
            return float(line.split()[2])
    return None


if __name__ == "__main__":
    main()
