"""Time durable execution on PostgreSQL: the cost of a step and of a wait/wake cycle.

    PYTHONPATH=. python benchmarks/durable.py [--steps 2000] [--tasks 500] [--runs 3]
    PYTHONPATH=. python benchmarks/durable.py --scale [--parked 1000000] [--running 100000]
        [--burst 100000] [--workers 10] [--private-cluster]

Into the database named by DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/scylla_bench_durable, created if missing):

- **a step**: one task runs `--steps` steps (`ctx.step(name, func)`, each recording a small
  JSON result in its fenced transaction) on the caller's thread (`run_task`, the worker's own
  execution code); printed: the statements per step (counted by Django), the time per step
  and PostgreSQL's CPU per step (the CPU of the one backend that runs them, from /proc),
  and, beside it, pgbench running the same statements (BEGIN, the lease's row locked FOR
  SHARE, the step's INSERT, COMMIT) as the floor of any fenced step, with its backend's CPU.
- **a wait/wake cycle**: `--tasks` tasks each run to a `ctx.wait_for(kind, match=...)` and
  park, an `emit()` per task wakes it, each runs again and completes; printed: the time and
  PostgreSQL's CPU per park, per wake (one emit in its own transaction) and per resume.
- **at scale** (`--scale`): `--parked` tasks parked (half waiting for an event of their own,
  half in a durable sleep of a day; written as a park writes them) beside `--running` ready
  tasks run by `--workers` worker processes (`scylla_worker --concurrency 10`, a step each).
  Printed: the sessions open on the database while the workers run and once they are idle
  (parked tasks hold none), the time to run the running tasks, the lease's latency at the
  backlog (p50 and p99 of a probe leasing and completing one task of its own queue, over and
  over, while the workers run, and again once they are idle) and pgbench's bare lease on the
  same queue at the same backlog once they are done (its floor), and a burst of `--burst`
  events each matching one waiting task, emitted by four processes at once: the time for all
  of them, and the waits woken (exactly `--burst`, each once, by its own event).
  `--running 0` leaves the workers out: the parked tasks, the idle probe and the burst.
"""

from __future__ import annotations

import argparse
import os
import time

import durable_scale  # benchmarks/durable_scale.py, beside this script
import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_durable"
#: Steps whose statements are counted (Django keeps the last 9,000 statements only).
COUNTED = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps in the step run")
    parser.add_argument("--tasks", type=int, default=500, help="tasks in the wait/wake run")
    parser.add_argument("--runs", type=int, default=3, help="repeat each run this many times")
    parser.add_argument("--scale", action="store_true", help="the scale run instead")
    parser.add_argument("--parked", type=int, default=1_000_000, help="tasks parked (--scale)")
    parser.add_argument("--running", type=int, default=100_000, help="tasks run (--scale)")
    parser.add_argument("--burst", type=int, default=100_000, help="events emitted (--scale)")
    parser.add_argument("--workers", type=int, default=10, help="worker processes (--scale)")
    parser.add_argument(
        "--private-cluster",
        action="store_true",
        help="run on a PostgreSQL cluster of its own (server defaults), removed at exit",
    )
    args = parser.parse_args()
    if args.private_cluster:
        from throughput import private_cluster

        os.environ["DATABASE_URL"] = private_cluster(parser)
    postgres.setup(parser, DEFAULT_URL)
    postgres.print_machine()
    if args.scale:
        durable_scale.run(args)
        return
    per_step, step_cpu, statements = [], [], 0.0
    for _ in range(args.runs):
        seconds, cpu, statements = time_steps(args.steps)
        per_step.append(seconds / args.steps * 1e6)
        step_cpu.append(cpu / args.steps * 1e6)
    print(
        f"a step: {statements:.1f} statements, {postgres.spread(per_step)} µs; "
        f"PostgreSQL CPU {postgres.spread(step_cpu)} µs"
    )
    phases: dict[str, list[float]] = {"park": [], "wake": [], "resume": []}
    cpus: dict[str, list[float]] = {"park": [], "wake": [], "resume": []}
    for _ in range(args.runs):
        for phase, (seconds, cpu) in time_waits(args.tasks).items():
            phases[phase].append(seconds / args.tasks * 1e6)
            cpus[phase].append(cpu / args.tasks * 1e6)
    for phase, what in (
        ("park", "a park (run to the wait)"),
        ("wake", "a wake (one emit)"),
        ("resume", "a resume (run past the wait to completion)"),
    ):
        print(
            f"{what}: {postgres.spread(phases[phase])} µs; "
            f"PostgreSQL CPU {postgres.spread(cpus[phase])} µs"
        )
    time_pgbench(args.steps)


def backend_cpu() -> float:
    """CPU seconds used so far by the backend of Django's connection (this thread's), read
    from /proc on this machine (nanoseconds: /proc/<pid>/schedstat)."""
    from pathlib import Path

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def time_steps(steps: int) -> tuple[float, float, float]:
    """Seconds of a run of `steps` steps, PostgreSQL's CPU seconds for them (the backend
    that runs them), and the statements per step."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scylla_django.handlers import HandlerRegistry, handler
    from scylla_django.models import Step, Task
    from scylla_django.testing import run_task

    durable_scale.clean()
    registry = HandlerRegistry()
    timed: dict[str, float] = {}

    @handler("bench-steps", registry=registry)
    def many_steps(ctx):
        ctx.step("warm", lambda: 0)
        with CaptureQueriesContext(connection) as queries:  # counted apart: it costs time
            for n in range(COUNTED):
                ctx.step(f"c{n}", lambda n=n: {"n": n})
        timed["statements"] = len(queries) / COUNTED
        cpu = backend_cpu()
        started = time.perf_counter()
        for n in range(steps):
            ctx.step(f"s{n}", lambda n=n: {"n": n})
        timed["seconds"] = time.perf_counter() - started
        timed["cpu"] = backend_cpu() - cpu
        return None

    task = Task.objects.submit("bench-steps", {})
    done = run_task(task.rn, registry=registry)
    assert done.status == "completed", done.errors
    assert Step.objects.filter(task=task).count() == steps + COUNTED + 1
    return timed["seconds"], timed["cpu"], timed["statements"]


def time_waits(tasks: int) -> dict[str, tuple[float, float]]:
    """Seconds, and PostgreSQL's CPU seconds (the backend that runs them), to park `tasks`
    tasks, to wake them (an emit each), and to run them on, by phase."""
    from scylla_django import emit
    from scylla_django.handlers import HandlerRegistry, handler
    from scylla_django.models import Task, Wait
    from scylla_django.testing import run_task

    durable_scale.clean()
    registry = HandlerRegistry()

    @handler("bench-waits", registry=registry)
    def waiter(ctx):
        return ctx.wait_for("bench.go", match={"n": ctx.spec["n"]})

    rns = [Task.objects.submit("bench-waits", {"n": n}).rn for n in range(tasks)]
    phases: dict[str, tuple[float, float]] = {}

    def timed(phase: str, work) -> None:
        cpu, started = backend_cpu(), time.perf_counter()
        work()
        phases[phase] = (time.perf_counter() - started, backend_cpu() - cpu)

    timed("park", lambda: [run_task(rn, registry=registry) for rn in rns])
    timed("wake", lambda: [emit("bench.go", {"n": n}) for n in range(tasks)])
    assert Wait.objects.filter(outcome="woken").count() == tasks
    timed("resume", lambda: [run_task(rn, registry=registry) for rn in rns])
    assert Task.objects.filter(queue="bench-waits", status="completed").count() == tasks
    return phases


def time_pgbench(steps: int) -> None:
    """The floor of a fenced step: its statements in pgbench, on a running task's row."""
    from datetime import timedelta

    from django.db.models.functions import Now
    from throughput import BackendSampler

    from scylla_django.models import Task

    durable_scale.clean()
    task = Task.objects.create(
        rn="bench-floor",
        queue="bench",
        spec={},
        status="running",
        owner="w",
        leases=1,
        deadline=Now() + timedelta(hours=1),
    )
    script = f"""
\\set n random(1, 1000000000)
BEGIN;
SELECT id FROM scylla_django_task WHERE id = {task.pk} AND status = 'running'
    AND owner = 'w' AND leases = 1 FOR SHARE;
INSERT INTO scylla_django_step (task_id, name, result, size, lease, time)
    VALUES ({task.pk}, 's' || :n, '{{"n": 1}}', 8, 1, now()) ON CONFLICT DO NOTHING;
COMMIT;
"""
    sampler = BackendSampler()
    sampler.start()
    tps, latencies = postgres.pgbench(script, transactions=steps)
    cpu = sampler.finish()
    latencies.sort()
    print(
        f"pgbench, the step's statements ({steps:,} runs, one client): "
        f"{1e6 / tps:,.0f} µs each, p50 {latencies[len(latencies) // 2] * 1000:,.0f} µs; "
        f"PostgreSQL CPU {cpu / steps * 1e6:,.0f} µs each"
    )


if __name__ == "__main__":
    main()
