"""What a `django.tasks` task costs a worker beyond a native handler's call: the client CPU per
task of the backend's handler (`run_django_task`) and of Django's `task_finished` built after
the outcome (`send_task_finished`), and how much of it is Django's own receivers.

    python benchmarks/django_tasks_adapter.py              # SQLite file, 5,000 tasks
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/scylla_bench \
        python benchmarks/django_tasks_adapter.py --runs 7

The tasks are enqueued and leased for real; then, in this process, each leased task is run
three ways and the CPU time per task printed (median of --runs passes):

- native: a no-op handler called with the task's context, then Scylla's `task_finished`
  receiver of the backend (which returns at once for a native task);
- django.tasks: the backend's handler, then Django's `task_finished`, as a worker runs them;
- the same with Django's two logging receivers (`log_task_started`, `log_task_finished`)
  disconnected: the difference is what Django logs per task (records made at INFO, which the
  default LOGGING keeps for the `django` loggers and then filters out unless DEBUG).

`--log-level WARNING` sets the `django.tasks` logger's level first, as a project can: its
receivers still run, and make no record.

No database statement is timed: the outcome's write is the same statement for both kinds of
task (benchmarks/throughput.py measures the whole path, beside native processing).
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("DATABASE_URL", f"sqlite:///{ROOT / 'bench.sqlite3'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--log-level",
        help="the level of the django.tasks logger (default: what LOGGING gives it), e.g. WARNING",
    )
    args = parser.parse_args()

    import django

    django.setup()
    if args.log_level:
        logging.getLogger("django.tasks").setLevel(args.log_level)
    try:
        from django.tasks.signals import (
            log_task_finished,
            log_task_started,
            task_finished,
            task_started,
        )
        from throughput_handlers import noop_task
    except ImportError:
        raise SystemExit("django.tasks needs Django 6+") from None
    from django.core.management import call_command
    from django.db import connection

    from scylla_django.backends import run_django_task, send_task_finished
    from scylla_django.enums import Status
    from scylla_django.handlers import TaskContext
    from scylla_django.models import Task, Worker

    # Nothing serves the queue while the tasks are enqueued: no warning per task.
    logging.getLogger("scylla_django").setLevel(logging.ERROR)
    call_command("migrate", verbosity=0)
    Task.objects.all().delete()
    for _ in range(args.tasks):
        noop_task.enqueue()
    worker = Worker.objects.register(["default"], args.tasks)
    leased = Task.objects.lease(worker, ["default"], limit=args.tasks, lease_length=3600)
    print(
        f"{connection.vendor}, Django {django.get_version()}, {len(leased):,} leased tasks, "
        f"median of {args.runs} runs, client CPU per task"
    )

    def handler(ctx: TaskContext) -> None:
        return None

    def native(ctx: TaskContext) -> None:
        handler(ctx)
        send_task_finished(sender=Task, task=ctx.task)

    def django_task(ctx: TaskContext) -> None:
        run_django_task(ctx)
        task = ctx.task
        task.status, task.progress, task.result = Status.COMPLETED, 1.0, None
        send_task_finished(sender=Task, task=task)

    def per_task(run: Callable[[TaskContext], None], spec: Any = None) -> float:
        # Each pass gets fresh copies: the backend keeps what it learns on the task. `spec`
        # replaces the copies' (a native task's, for the native way).
        contexts = [TaskContext(copy.copy(task), worker) for task in leased]
        if spec is not None:
            for ctx in contexts:
                ctx.task.spec = spec
        started = time.process_time()
        for ctx in contexts:
            run(ctx)
        return (time.process_time() - started) / len(contexts) * 1e6

    def median(run: Callable[[TaskContext], None], spec: Any = None) -> float:
        return statistics.median(per_task(run, spec) for _ in range(args.runs))

    base = median(native, {"n": 1})
    full = median(django_task)
    task_started.disconnect(log_task_started)
    task_finished.disconnect(log_task_finished)
    unlogged = median(django_task)
    print(f"{'native: handler call + task_finished receiver':<52} {base:8.1f} µs")
    print(f"{'django.tasks: run_django_task + task_finished':<52} {full:8.1f} µs")
    print(f"{'  without Django log receivers':<52} {unlogged:8.1f} µs")
    print(f"{'  of which Django log receivers':<52} {full - unlogged:8.1f} µs")


if __name__ == "__main__":
    main()
