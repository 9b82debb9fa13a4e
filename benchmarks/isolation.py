"""What process isolation costs per task, beside the thread mode, in-process against PostgreSQL.

    PYTHONPATH=. python benchmarks/isolation.py [--tasks 2000] [--slow-tasks 100] [--runs 3]

Into the database named by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
scylla_bench_isolation, created and migrated if missing) it measures, for `isolation="thread"`
and `isolation="process"`, one `TaskWorker` with concurrency 1 that runs `--tasks` no-op tasks,
then `--slow-tasks` tasks that sleep 100 ms:

- time per task: from the first task's completion to the last one's (the database's
  `updated`), over the tasks after the first, so the children's start is left out;
- CPU per task: of this process and its children (every thread), over the whole run (the
  child's start included);
- a child's start: a `Child` started (a new interpreter, Django set up) and closed.

No pgbench figure stands beside these: what isolation adds is a pipe round trip and pickling
between two local processes, not database work, and the database work is the same in both
modes (the same statements per task).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import time
from typing import Any

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_isolation"


def noop(ctx: Any) -> None:
    """A handler that does nothing (module-level: a child finds it by name)."""


def sleep(ctx: Any) -> None:
    """A handler that sleeps 100 ms."""
    time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--slow-tasks", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    postgres.setup(parser, DEFAULT_URL)
    import logging

    import django

    logging.getLogger("scylla_django").setLevel(logging.ERROR)
    print(f"{os.cpu_count()} CPUs, Django {django.get_version()}, medians of {args.runs} runs")
    print("(no pgbench figure: isolation adds local IPC, not database work)")
    starts = [child_start() for _ in range(args.runs)]
    print(f"a child's start (spawn, Django set up) and close: {statistics.median(starts):.2f} s")
    for label, handler, n in (("no-op", noop, args.tasks), ("100 ms", sleep, args.slow_tasks)):
        figures = {}
        for isolation in ("thread", "process"):
            runs = [run(isolation, handler, n) for _ in range(args.runs)]
            per_task = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            figures[isolation] = per_task
            print(
                f"{label:>6} tasks, {isolation:>7}: {per_task * 1000:8.2f} ms per task "
                f"({1 / per_task:8.1f} tasks/s), {cpu * 1000:6.2f} ms of CPU per task"
            )
        added = (figures["process"] - figures["thread"]) * 1000
        print(f"{label:>6} tasks: process isolation adds {added:.2f} ms per task")


def child_start() -> float:
    from scylla_django.child import Setup
    from scylla_django.worker.isolation import Child

    started = time.perf_counter()
    child = Child(Setup.of_this_process(), name="bench-child")
    child.start()
    child.close()
    return time.perf_counter() - started


def run(isolation: str, handler: Any, n: int) -> tuple[float, float]:
    """Run `n` tasks of `handler`; the seconds per task (steady state) and the CPU per task."""
    from scylla_django.handlers import HandlerRegistry
    from scylla_django.models import Task, Worker
    from scylla_django.worker import TaskWorker, WorkerOptions

    Task.objects.all().delete()
    Worker.objects.all().delete()
    registry = HandlerRegistry()
    registry.register("bench-isolation", handler)
    for start in range(0, n, 1000):
        Task.objects.submit_many(
            {"queue": "bench-isolation", "spec": {"n": i}}
            for i in range(start, min(n, start + 1000))
        )
    worker = TaskWorker(
        WorkerOptions(
            ["bench-isolation"],
            concurrency=1,
            poll_interval=0.05,
            max_tasks=n,
            registry=registry,
            listen=False,
            isolation=isolation,
        )
    )
    cpu_before = cpu_seconds()
    worker.run()
    while multiprocessing.active_children():  # the children's CPU counts once they are reaped
        time.sleep(0.01)
    cpu = cpu_seconds() - cpu_before
    times = sorted(Task.objects.filter(status="completed").values_list("updated", flat=True))
    assert len(times) == n, f"{len(times)} of {n} tasks completed"
    return (times[-1] - times[0]).total_seconds() / (n - 1), cpu / n


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have exited."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
