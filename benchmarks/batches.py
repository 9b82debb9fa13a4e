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
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_batches"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks per run")
    parser.add_argument("--chunk", type=int, default=500, help="tasks leased and finished at once")
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
        submitted, finished, passes = run(args.tasks, args.chunk, in_batch)
        print(
            f"{label:>6}: submit {args.tasks / submitted:>9,.0f} tasks/s, "
            f"lease+finish {args.tasks / finished:>8,.0f} tasks/s "
            f"({finished / args.tasks * 1e6:.1f} µs a task)"
        )
        if passes is not None:
            idle, release = passes
            print(f"        callbacks pass while running: {idle * 1e3:.2f} ms")
            print(f"        callbacks pass releasing on_success: {release * 1e3:.2f} ms")
    rate = pgbench_counter()
    if rate is not None:
        print(f"pgbench, one counter row UPDATE per transaction, 1 client: {rate:,.0f} tps")


def run(n: int, chunk: int, in_batch: bool) -> tuple[float, float, tuple[float, float] | None]:
    """Submit and finish `n` tasks; the seconds each took, and the two callback passes."""
    from django.db import connection

    from scylla_django.batches import Batch, release_callbacks
    from scylla_django.models import Batch as BatchRow
    from scylla_django.models import Outcome, Task, Worker

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_worker, "
            "scylla_django_batch RESTART IDENTITY"
        )
    worker = Worker.objects.register(queues=["bench", "report"], capacity=chunk, hostname="b")
    items = ({"queue": "bench", "spec": {"n": i}} for i in range(n))
    started = time.perf_counter()
    if in_batch:
        with Batch(on_success=("report", {"done": True})) as batch:
            batch.submit_many(items)
        assert batch.row is not None
        row = batch.row
    else:
        Task.objects.submit_many(items)
    submitted = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scylla_django_task")

    idle = 0.0
    started = time.perf_counter()
    done = 0
    while leased := Task.objects.lease(worker, ["bench"], limit=chunk):
        Task.objects.finish_many(
            worker, [Outcome(t.pk, t.leases, result={"n": t.spec["n"]}) for t in leased]
        )
        done += len(leased)
        if in_batch and done == n // 2:
            began = time.perf_counter()
            assert release_callbacks().released == 0
            idle = time.perf_counter() - began
            started += idle  # not part of the finishing
    finished = time.perf_counter() - started
    assert done == n, done
    if not in_batch:
        return submitted, finished, None
    began = time.perf_counter()
    released = release_callbacks().released
    release = time.perf_counter() - began
    assert released == 1, released
    assert release_callbacks().released == 0
    row = BatchRow.objects.get(pk=row.pk)
    assert (row.total, row.completed, row.failed) == (n, n, 0)
    return submitted, finished, (idle, release)


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
