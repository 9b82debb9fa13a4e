"""The worker's own cost and reaction times, in-process against PostgreSQL.

    PYTHONPATH=. python benchmarks/worker.py [--tasks 5000] [--concurrency 4] [--samples 200]

Into the database named by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
scylla_bench_worker, created and migrated if missing) it measures:

1. worker CPU per no-op task: `--tasks` tasks submitted up front, then one `TaskWorker` leases,
   runs and completes them all; the CPU time of this process (every thread) during `run()`
   divided by the tasks, and the rate;
2. submit → start: an idle worker (poll interval 1 s) and `--samples` single submits, each
   timed from before `submit()` to the handler's first line;
3. cancel → stop: a running handler calling `ctx.check()` every millisecond, timed from before
   `cancel()` to `ctx.check()` raising.

When `submit()`/`cancel()` do not send their notifications themselves, the benchmark sends them
right after the call (and says so), as the database would.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_worker"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    postgres.setup(parser, DEFAULT_URL)
    import logging

    import django

    logging.getLogger("scylla_django").setLevel(logging.WARNING)
    print(f"{os.cpu_count()} CPUs, Django {django.get_version()}")
    cpu(args.tasks, args.concurrency)
    submit_to_start(args.samples)
    cancel_to_stop(max(10, args.samples // 4))


def clean() -> None:
    from scylla_django.models import Task, Worker

    Task.objects.all().delete()
    Worker.objects.all().delete()


def cpu(n: int, concurrency: int) -> None:
    from scylla_django.handlers import HandlerRegistry
    from scylla_django.models import Task
    from scylla_django.worker import TaskWorker, WorkerOptions

    clean()
    registry = HandlerRegistry()
    registry.register("bench-noop", lambda ctx: None)
    for start in range(0, n, 1000):
        Task.objects.submit_many(
            {"queue": "bench-noop", "spec": {"n": i}} for i in range(start, min(n, start + 1000))
        )
    worker = TaskWorker(
        WorkerOptions(
            ["bench-noop"],
            concurrency=concurrency,
            poll_interval=0.05,
            max_tasks=n,
            registry=registry,
            listen=False,
        )
    )
    wall, cpu_time = time.perf_counter(), time.process_time()
    worker.run()
    wall, cpu_time = time.perf_counter() - wall, time.process_time() - cpu_time
    done = Task.objects.filter(status="completed").count()
    assert done == n, f"{done} of {n} completed"
    print(
        f"no-op tasks: {n} with concurrency {concurrency} in {wall:.2f} s = {n / wall:,.0f}/s; "
        f"worker CPU {cpu_time * 1000 / n:.3f} ms per task"
    )


def percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms"


def notifies(channel: str, action: Any) -> bool:
    """Whether `action()` sends a notification on `channel` by itself."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    with psycopg.connect(**params, autocommit=True) as listening:
        listening.execute(f"LISTEN {channel}")
        action()
        return bool(list(listening.notifies(timeout=0.5, stop_after=1)))


def running_worker(registry: Any) -> tuple[Any, threading.Thread]:
    from scylla_django.worker import TaskWorker, WorkerOptions

    worker = TaskWorker(WorkerOptions(["bench-probe"], poll_interval=1.0, registry=registry))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    while worker.listener is None or not worker.listener.connected.is_set():
        time.sleep(0.01)
    time.sleep(0.1)
    return worker, thread


def submit_to_start(samples: int) -> None:
    from django.db import connection

    from scylla_django import db
    from scylla_django.handlers import HandlerRegistry
    from scylla_django.models import Task

    clean()
    started: dict[str, float] = {}
    seen = threading.Event()

    def probe(ctx: Any) -> None:
        started[ctx.task.rn] = time.perf_counter()
        seen.set()

    registry = HandlerRegistry()
    registry.register("bench-probe", probe)
    emits = notifies(db.READY_CHANNEL, lambda: Task.objects.submit("bench-other", {}))
    worker, thread = running_worker(registry)
    latencies = []
    for i in range(samples):
        seen.clear()
        begun = time.perf_counter()
        Task.objects.submit("bench-probe", {}, rn=f"probe-{i}")
        if not emits:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [db.READY_CHANNEL, "bench-probe"])
        seen.wait(5)
        latencies.append(started[f"probe-{i}"] - begun)
        time.sleep(0.01)
    worker.stop()
    thread.join(10)
    how = "submit notifies" if emits else "NOTIFY sent by the benchmark after submit"
    print(f"submit -> start ({how}; poll 1 s): {percentiles(latencies)}")


def cancel_to_stop(samples: int) -> None:
    from django.db import connection

    from scylla_django import db
    from scylla_django.exceptions import TaskCancelled
    from scylla_django.handlers import HandlerRegistry
    from scylla_django.models import Task, Worker

    clean()
    stopped: dict[str, float] = {}
    running = threading.Event()
    done = threading.Event()

    def spin(ctx: Any) -> None:
        running.set()
        try:
            while True:
                ctx.check()
                time.sleep(0.001)
        except TaskCancelled:
            stopped[ctx.task.rn] = time.perf_counter()
            done.set()
            raise

    registry = HandlerRegistry()
    registry.register("bench-probe", spin)
    worker, thread = running_worker(registry)
    Task.objects.submit("bench-other", {})
    [probe] = Task.objects.lease(Worker.objects.register(["bench-other"]), ["bench-other"])
    emits = notifies(db.STOP_CHANNEL, lambda: probe.cancel())
    latencies = []
    for i in range(samples):
        running.clear()
        done.clear()
        task = Task.objects.submit("bench-probe", {}, rn=f"spin-{i}")
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [db.READY_CHANNEL, "bench-probe"])
        running.wait(5)
        time.sleep(0.02)
        begun = time.perf_counter()
        Task.objects.get(pk=task.pk).cancel()
        if not emits:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [db.STOP_CHANNEL, worker.name])
        done.wait(5)
        latencies.append(stopped[f"spin-{i}"] - begun)
    worker.stop()
    thread.join(10)
    how = "cancel notifies" if emits else "NOTIFY sent by the benchmark after cancel"
    print(
        f"cancel -> ctx.check() raises ({how}; heartbeat every "
        f"{worker.options.heartbeat_seconds:g} s): {percentiles(latencies)}"
    )


if __name__ == "__main__":
    main()
