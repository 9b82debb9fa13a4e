"""The scale run of benchmarks/durable.py (`--scale`): tasks parked in waits and sleeps beside
running ones on worker processes and one PostgreSQL; see that script's docstring."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARKED_QUEUE = "bench-durable-parked"
PROBE_QUEUE = "bench-durable-probe"
#: Tasks the lease probe may take (it stops when the workers are done).
PROBES = 20_000
EMITTERS = 4


def clean() -> None:
    """Empty the tables the durable benchmarks fill."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_step, "
            "scylla_django_wait, scylla_django_tasksignal, scylla_django_event "
            "RESTART IDENTITY CASCADE"
        )


def run(args: Any) -> None:
    from durable_handlers import RUN

    clean()
    started = time.perf_counter()
    seed(PARKED_QUEUE, args.parked, parked=True)
    seed(RUN, args.running)
    seed(PROBE_QUEUE, PROBES)
    analyze()
    print(
        f"seeded {args.parked:,} parked ({args.parked // 2:,} waiting for an event, the rest "
        f"sleeping), {args.running:,} ready to run, in {time.perf_counter() - started:,.0f} s"
    )
    latencies = run_workers(args) if args.running else []
    # The same probe with nothing else running: the lease at the backlog itself.
    idle: list[float] = []
    lease_probe(idle, threading.Event(), count=min(2000, PROBES - len(latencies)))
    idle.sort()
    if idle:
        print(
            f"lease at the backlog with the workers idle ({len(idle):,} probes, one task each): "
            f"p50 {percentile(idle, 0.5):,.1f} ms, p99 {percentile(idle, 0.99):,.1f} ms"
        )
    lease_floor(min(2000, PROBES - len(latencies) - len(idle)))
    burst(min(args.burst, args.parked // 2))


def run_workers(args: Any) -> list[float]:
    """Run the ready tasks on `args.workers` worker processes beside the parked ones, the
    probe leasing meanwhile; print their rate and the sessions held; return the probe's
    latencies."""
    from durable_handlers import RUN

    idle = sessions()
    workers = [worker(RUN) for _ in range(args.workers)]
    seen: list[int] = []
    latencies: list[float] = []
    done = threading.Event()
    probe = threading.Thread(target=lease_probe, args=(latencies, done), daemon=True)
    try:
        probe.start()
        first = None  # when the first task completed: the workers' start-up is not counted
        while (count := completed(RUN)) < args.running:
            if first is None and count:
                first = (time.perf_counter(), count)
            seen.append(sessions())
            time.sleep(0.5)
        started, before = first or (time.perf_counter(), 0)
        elapsed = time.perf_counter() - started
        ran = args.running - before
        done.set()
        probe.join(60)
        time.sleep(2)
        busy_idle = sessions()
    finally:
        for process in workers:
            process.terminate()
        for process in workers:
            process.wait(60)
    latencies.sort()
    print(
        f"{args.running:,} tasks run by {args.workers} workers beside {args.parked:,} parked: "
        f"{ran / elapsed:,.0f} tasks/s (from the first completion on)"
    )
    print(
        f"sessions on the database: {idle} before the workers, at most {max(seen, default=0)} "
        f"while they ran, {busy_idle} with the workers idle ({args.parked:,} tasks parked)"
    )
    if latencies:
        print(
            f"lease at the backlog ({len(latencies):,} probes, one task each): "
            f"p50 {percentile(latencies, 0.5):,.1f} ms, p99 {percentile(latencies, 0.99):,.1f} ms"
        )
    return latencies


def seed(queue: str, count: int, *, parked: bool = False) -> None:
    """`count` tasks of `queue`, copied in one statement from a submitted one; parked ones
    written as a park writes them: even numbers wait for the event `bench.go` of their
    number, odd ones sleep a day."""
    from django.db import connection

    from scylla_django.models import PARKED, Task
    from scylla_django.models.waits import match_key

    template = Task.objects.submit(queue, {"n": 0}, rn=f"{queue}-template")
    fields = [f.column for f in Task._meta.concrete_fields if f.column not in ("id", "rn")]
    values = {column: f'"{column}"' for column in fields}
    values["spec"] = "jsonb_build_object('n', g)"
    if parked:
        values.update(
            leases="1",
            snoozes="1",
            not_before="CASE WHEN g %% 2 = 0 THEN %s ELSE now() + interval '1 day' END",
        )
    columns = ", ".join(f'"{c}"' for c in fields)
    selected = ", ".join(values[c] for c in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO scylla_django_task ({columns}, "rn") '
            f"SELECT {selected}, %s || '-' || g FROM scylla_django_task, generate_series(1, %s) g "
            "WHERE id = %s",
            ([PARKED] if parked else []) + [queue, count, template.pk],
        )
        cursor.execute("DELETE FROM scylla_django_task WHERE id = %s", [template.pk])
        if parked:
            cursor.execute(
                "INSERT INTO scylla_django_wait (task_id, name, kind, event_kind, match, "
                "match_key, lease, started, timeout) "
                "SELECT id, CASE WHEN n %% 2 = 0 THEN 'event:bench.go' ELSE 'sleep' END, "
                "CASE WHEN n %% 2 = 0 THEN 'event' ELSE 'sleep' END, "
                "CASE WHEN n %% 2 = 0 THEN 'bench.go' END, "
                "CASE WHEN n %% 2 = 0 THEN jsonb_build_object('n', n) END, "
                # models.waits.match_key({"n": n}), as PostgreSQL computes it.
                "CASE WHEN n %% 2 = 0 THEN "
                "left(encode(sha256(convert_to('n=' || n, 'UTF8')), 'hex'), 32) END, 1, now(), "
                "CASE WHEN n %% 2 = 1 THEN not_before END "
                "FROM (SELECT id, not_before, (spec->>'n')::int AS n FROM scylla_django_task "
                "WHERE queue = %s) AS t",
                [queue],
            )
            # The SQL above computes the key as the app does: a wait it missed would never wake.
            cursor.execute(
                "SELECT match_key FROM scylla_django_wait WHERE match = %s::jsonb",
                ['{"n": 2}'],
            )
            assert cursor.fetchone() == (match_key({"n": 2}),), "the seeded keys are not the app's"


def analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE scylla_django_task")
        cursor.execute("VACUUM ANALYZE scylla_django_wait")


def sessions() -> int:
    """The sessions open on the database, this one apart."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def completed(queue: str) -> int:
    from scylla_django.models import Task

    return Task.objects.filter(queue=queue, status="completed").count()


def worker(queue: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")]),
    }
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "scylla_worker",
            f"--queue={queue}",
            "--concurrency=10",
            "--handlers=durable_handlers",
            "-v0",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def lease_probe(latencies: list[float], done: threading.Event, count: int | None = None) -> None:
    """Lease one probe task at a time, complete it, until `done` (or `count` leases): the
    lease's latency, in ms."""
    from django.db import connections

    from scylla_django.models import Task, Worker

    try:
        probe = Worker.objects.register(queues=[PROBE_QUEUE], capacity=1)
        while not done.is_set() and (count is None or len(latencies) < count):
            started = time.perf_counter()
            leased = Task.objects.lease(probe, [PROBE_QUEUE], limit=1)
            latencies.append((time.perf_counter() - started) * 1000)
            if not leased:
                break
            leased[0].complete(probe)
    finally:
        connections.close_all()


#: The bare lease, beside the probe's: the ready task of the probe's queue first in the lease's
#: order locked (SKIP LOCKED) and made running, and its TaskAssignment row, in one transaction.
LEASE_FLOOR = f"""\
BEGIN;
WITH picked AS (
  SELECT id FROM scylla_django_task
  WHERE status = 'ready' AND queue = '{PROBE_QUEUE}' AND (not_before IS NULL OR not_before <= now())
  ORDER BY priority DESC, turn, created, id LIMIT 1 FOR UPDATE SKIP LOCKED
)
UPDATE scylla_django_task t SET status = 'running', owner = 'pgbench-' || :client_id,
  deadline = now() + interval '60 seconds', leases = t.leases + 1, updated = now()
FROM picked WHERE t.id = picked.id RETURNING t.id AS task_id \\gset
INSERT INTO scylla_django_history (task_id, typ, worker, time)
VALUES (:task_id, 'TaskAssignment', 'pgbench-' || :client_id, now());
COMMIT;
"""


def lease_floor(transactions: int) -> None:
    """pgbench leasing `transactions` tasks of the probe's queue, one at a time, at the same
    backlog (the parked tasks are still there): the floor of the probe's lease."""
    import postgres  # benchmarks/postgres.py, beside this script

    if transactions <= 0:
        return
    _, latencies = postgres.pgbench(LEASE_FLOOR, transactions=transactions)
    latencies.sort()
    print(
        f"pgbench, the bare lease at the same backlog ({transactions:,} runs, one client): "
        f"p50 {percentile(latencies, 0.5):,.1f} ms, p99 {percentile(latencies, 0.99):,.1f} ms"
    )


def burst(count: int) -> None:
    """`count` events, each matching one waiting task, emitted by EMITTERS processes at once;
    the waits they woke counted in the database."""
    from django.db.models import F

    from scylla_django.models import Wait

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = (
        "from scylla_django import emit\n"
        "import sys\n"
        "import time\n"
        "first, count, step = (int(a) for a in sys.argv[1:4])\n"
        "started = time.perf_counter()\n"
        "for i in range(first, count, step):\n"
        "    emit('bench.go', {'n': 2 * (i + 1)})\n"
        "print('emitted in', time.perf_counter() - started)\n"
    )
    emitters = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "shell", "-c", launcher(code, n, count)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for n in range(EMITTERS)
    ]
    # The slowest emitter's own time, from its first emit to its last (not its start-up).
    elapsed = max(float(process.communicate()[0].split("emitted in")[1]) for process in emitters)
    woken = Wait.objects.filter(outcome="woken", event_kind="bench.go")
    events = woken.values("event").distinct().count()
    # Exact: each woken wait's payload is the event of its own number.
    others = woken.exclude(payload=F("match")).count()
    print(
        f"a burst of {count:,} events by {EMITTERS} processes, each matching one waiting task: "
        f"{elapsed:,.1f} s ({count / elapsed:,.0f} events/s, the slowest emitter's own time); "
        f"waits woken {woken.count():,}, by {events:,} distinct events, "
        f"{others:,} by an event not their own"
    )


def launcher(code: str, number: int, count: int) -> str:
    """`code` with its sys.argv set: this emitter's share of the burst."""
    return f"import sys\nsys.argv = ['emit', '{number}', '{count}', '{EMITTERS}']\n" + code


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(len(values) * fraction))]
