"""Fair shares on PostgreSQL: lease latency at a backlog with fairness on beside the same backlog
without it and beside pgbench, and the full-size runs of issue 43 with 8 lessee processes.

    PYTHONPATH=. python benchmarks/fairness.py [--tasks 200000] [--tenants 10000]
        [--leases 300] [--runs 3] [--big 20000] [--lessees 8] [--skip-lease] [--skip-runs]

It replaces every task of the database named by DATABASE_URL (default postgres://postgres@
127.0.0.1:5432/scylla_bench_fair, created if missing).

- lease: `--tasks` ready tasks in queue `p` without a fair key and as many in queue `f`, a
  share by tenant over `--tenants` tenants (submitted in tenant order, so each tenant's tasks
  are one block of age: oldest-first would serve one tenant at a time), their turns given by
  the insert trigger. Then `--leases` calls of `lease(limit=1)` and of `lease(limit=10)` by one
  worker on each queue, interleaved, client side, round trip and commit included (each leased
  task put back to ready after its call, outside the timing); p50 and p99, the median of
  `--runs` runs, and "fair/plain", the fair queue's p99 over the plain one's in the same run
  (median [min-max] of the runs; the target: at most 1.5). pgbench: the same lease
  in SQL on queue `f` (the ready-index walk in turn order, FOR UPDATE SKIP LOCKED, UPDATE,
  History INSERT), one client, as many transactions.
- runs (`tests.keys_child` lessees, leasing 3 at a time and finishing them): one tenant
  submits `--big` tasks, then, once 500 have started, another submits 10: how many of the big
  tenant's tasks started from then until the last of the 10 did (the bound: 10 plus what the
  lessees held, 3 each); weights 3:1 over the first 2,000 starts of two backlogged tenants;
  1,000 tenants of a limit family with a default of 2, 5 tasks each, checked on one snapshot
  at a time for a tenant with more than 2 running.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_fair"
ROOT = Path(__file__).resolve().parent.parent

LEASE_SQL = """\
BEGIN;
WITH picked AS (
  SELECT id FROM scylla_django_task
  WHERE status = 'ready' AND queue = 'f' AND (not_before IS NULL OR not_before <= now())
  ORDER BY priority DESC, turn, created, id LIMIT {limit} FOR UPDATE SKIP LOCKED
), leased AS (
  UPDATE scylla_django_task t SET status = 'running', owner = 'pgbench',
    deadline = now() + interval '60 seconds', leases = t.leases + 1, updated = now()
  FROM picked WHERE t.id = picked.id RETURNING t.id
)
INSERT INTO scylla_django_history (task_id, typ, worker, time)
SELECT id, 'TaskAssignment', 'pgbench', now() FROM leased;
COMMIT;
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200_000, help="ready tasks per queue")
    parser.add_argument("--tenants", type=int, default=10_000, help="tenants of the fair queue")
    parser.add_argument("--leases", type=int, default=300, help="timed leases per case")
    parser.add_argument("--runs", type=int, default=3, help="runs of each lease figure")
    parser.add_argument("--big", type=int, default=20_000, help="the big tenant's tasks")
    parser.add_argument("--lessees", type=int, default=8, help="lessee processes of the runs")
    parser.add_argument("--skip-lease", action="store_true", help="no lease latency figures")
    parser.add_argument("--skip-runs", action="store_true", help="no runs with lessees")
    args = parser.parse_args()

    postgres.setup(parser, DEFAULT_URL)
    postgres.print_machine()
    if not args.skip_lease:
        seed(args.tasks, args.tenants)
        lease_figures(args.leases, args.runs)
    if not args.skip_runs:
        late_tenant(args.big, args.lessees)
        weights(args.lessees)
        families(args.lessees)


def clear() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_worker, "
            "scylla_django_queuesetting, scylla_django_limit, scylla_django_key RESTART IDENTITY"
        )


def seed(n: int, tenants: int) -> None:
    """`n` ready tasks in `p`, and `n` in `f` shared by tenant over `tenants` tenants (in
    tenant order, through the turn trigger)."""
    from django.db import connection

    from scylla_django.models import QueueSetting

    clear()
    QueueSetting.objects.share("f", "tenant")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for queue, fair in (("p", "NULL"), ("f", "'t' || ((g - 1) * %s / %s)")):
            params = [tenants, n, n] if queue == "f" else [n]
            cursor.execute(
                f"""INSERT INTO scylla_django_task (rn, queue, spec, priority, status, progress,
                    updated, errors, leases, attempt, snoozes, fair_key)
                SELECT '{queue}-' || g, '{queue}', '{{}}'::jsonb, 0, 'ready', 0, now(), '[]',
                    0, 1, 0, {fair}
                FROM generate_series(1, %s) AS g""",
                params[-1:] if queue == "p" else params,
            )
        cursor.execute("VACUUM ANALYZE scylla_django_task")
    print(
        f"seeded {n:,} plain and {n:,} fair tasks ({tenants:,} tenants) "
        f"in {time.perf_counter() - started:.1f} s",
        flush=True,
    )


def lease_figures(count: int, runs: int) -> None:
    """p50 and p99 of `count` leases per queue and limit, the median of `runs` runs (the runs
    of the two queues and of pgbench interleaved), and fair/plain: the fair queue's p99 over
    the plain one's, per run, its median."""
    from scylla_django.models import Task, Worker

    worker = Worker.objects.register(queues=["p", "f"], capacity=10)
    print(f"{'limit':>5} {'queue':>6} {'p50 ms':>8} {'p99 ms':>8}  (median of {runs} runs)")
    for limit in (1, 10):
        p50s: dict[str, list[float]] = {"p": [], "f": [], "pgbench": []}
        p99s: dict[str, list[float]] = {"p": [], "f": [], "pgbench": []}
        for _ in range(runs):
            times: dict[str, list[float]] = {"p": [], "f": []}
            for n in range(count + 5):
                for queue in ("p", "f"):
                    started = time.perf_counter()
                    leased = Task.objects.lease(worker, [queue], limit=limit, lease_length=60)
                    took = (time.perf_counter() - started) * 1000
                    assert len(leased) == limit
                    if n >= 5:  # the first are warm-up: the connection, the plan cache
                        times[queue].append(took)
                    put_back(leased)
            _, times["pgbench"] = postgres.pgbench(
                LEASE_SQL.format(limit=limit), transactions=count
            )
            Task.objects.filter(owner="pgbench").update(status="ready", owner=None, deadline=None)
            for queue, taken in times.items():
                p50s[queue].append(statistics.median(taken))
                p99s[queue].append(statistics.quantiles(taken, n=100)[98])
        for queue, label in (("p", "plain"), ("f", "fair"), ("pgbench", "pgb")):
            print(
                f"{limit:>5} {label:>6} {statistics.median(p50s[queue]):>8.2f} "
                f"{statistics.median(p99s[queue]):>8.2f}",
                flush=True,
            )
        ratios = [f / p for f, p in zip(p99s["f"], p99s["p"], strict=True)]
        print(f"      fair/plain p99: {postgres.spread(ratios, '{:.2f}')}", flush=True)


def put_back(tasks: list[object]) -> None:
    from scylla_django.models import Task

    Task.objects.filter(pk__in=[t.pk for t in tasks]).update(  # type: ignore[attr-defined]
        status="ready", owner=None, deadline=None, leases=0
    )


def lessees(queue: str, count: int, seconds: float, tmp: Path) -> list[subprocess.Popen]:
    """`count` lessee processes of `queue` (`tests.keys_child`) for `seconds`, started."""
    go = tmp / f"go-{queue}"
    ready = [tmp / f"ready-{queue}-{i}" for i in range(count)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.keys_child", queue, str(flag), str(go), str(seconds)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        for flag in ready
    ]
    while not all(flag.exists() for flag in ready):
        assert all(child.poll() is None for child in children), "a lessee died"
        time.sleep(0.05)
    go.touch()
    return children


def wait_all(children: list[subprocess.Popen]) -> None:
    for child in children:
        child.wait(timeout=600)


def late_tenant(big: int, count: int) -> None:
    from scylla_django.models import History, QueueSetting, Task

    clear()
    QueueSetting.objects.share("late", "tenant")
    Task.objects.submit_many({"queue": "late", "spec": n, "fair_key": "big"} for n in range(big))
    with TemporaryDirectory() as tmp:
        children = lessees("late", count, 120.0, Path(tmp))
        try:
            while Task.objects.filter(queue="late").exclude(status="ready").count() < 500:
                assert any(child.poll() is None for child in children), "the lessees stopped"
                time.sleep(0.05)
            mark = History.objects.order_by("-id").values_list("id", flat=True).first()
            small = [Task.objects.submit("late", n, fair_key="small").pk for n in range(10)]
            while Task.objects.filter(pk__in=small, status="ready").exists():
                assert any(child.poll() is None for child in children), "the lessees stopped"
                time.sleep(0.05)
        finally:
            for child in children:
                child.kill()
            wait_all(children)
    starts = list(
        History.objects.filter(id__gt=mark, typ="TaskAssignment")
        .order_by("id")
        .values_list("task_id", flat=True)
    )
    before = max(starts.index(pk) for pk in small) + 1 - len(small)
    waiting = Task.objects.filter(queue="late", status="ready").count()
    print(
        f"late tenant: its 10 tasks started among the big tenant's next {before} "
        f"(bound {10 + 3 * count}); {waiting:,} of the big tenant's still ready",
        flush=True,
    )


def weights(count: int) -> None:
    from scylla_django.models import History, QueueSetting, Task

    clear()
    QueueSetting.objects.share("w", "tenant", weights={"gold": 3})
    Task.objects.submit_many(
        {"queue": "w", "spec": n, "fair_key": key} for key in ("gold", "lead") for n in range(3000)
    )
    with TemporaryDirectory() as tmp:
        children = lessees("w", count, 60.0, Path(tmp))
        try:
            while History.objects.filter(typ="TaskAssignment").count() < 2000:
                if all(child.poll() is not None for child in children):
                    break  # the lessees' time is up: the window is what they started
                time.sleep(0.05)
        finally:
            for child in children:
                child.kill()
            wait_all(children)
    starts = Counter(
        History.objects.filter(typ="TaskAssignment")
        .order_by("id")
        .values_list("task__fair_key", flat=True)[:2000]
    )
    total = sum(starts.values())
    ratio = starts["gold"] / starts["lead"]
    print(f"weights 3:1: first {total:,} starts {dict(starts)}: {ratio:.2f}", flush=True)


def families(count: int) -> None:
    from django.conf import settings
    from django.test import override_settings

    from scylla_django.models import Limit, Task

    clear()
    scylla = {**getattr(settings, "SCYLLA", {}), "LIMITS": {"tenant": {"default": 2}}}
    with override_settings(SCYLLA=scylla):
        Task.objects.submit_many(
            {"queue": "fam", "spec": n, "limits": [("tenant", t)]}
            for t in range(1000)
            for n in range(5)
        )
    rows = Limit.objects.filter(name__startswith="tenant:").count()
    worst, checks = 0, 0
    with TemporaryDirectory() as tmp:
        children = lessees("fam", count, 20.0, Path(tmp))
        try:
            while any(child.poll() is None for child in children):
                running = Counter(
                    e
                    for keys in Task.objects.filter(status="running", queue="fam").values_list(
                        "keys", flat=True
                    )
                    for e in keys
                )
                worst = max([worst, *running.values()])
                checks += 1
        finally:
            wait_all(children)
    done = Task.objects.filter(queue="fam").exclude(status="ready").count()
    print(
        f"families: 1,000 tenants, {rows:,} limit rows made at submit; {done:,} tasks run, "
        f"{checks:,} snapshots, most running of one tenant {worst} (limit 2)",
        flush=True,
    )


if __name__ == "__main__":
    main()
