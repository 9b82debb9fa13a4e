"""Many long-running tasks held at once on PostgreSQL: --tasks `async def` handlers held by at
most 10 worker processes, with a monitor running, and what holding them costs.

    python benchmarks/concurrent_tasks.py                          # 20,000 tasks on 4 workers
    python benchmarks/concurrent_tasks.py --tasks 100000 --workers 10
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/scylla_bench_concurrent \\
        python benchmarks/concurrent_tasks.py --tasks 5000 --workers 2 --hold 20

It creates and migrates the database named by DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/scylla_bench_concurrent) and uses tests/settings.py. The
tables are emptied first: point it at a scratch database. Workers are real
`manage.py scylla_worker` processes loading benchmarks/concurrent_tasks_handlers.py, each with
--concurrency tasks/workers (+1 for the probes) and the default options otherwise; a real
`manage.py scylla_monitor` runs beside them. Each held task's handler waits in `ctx.sleep()`
and wakes every --step seconds to report progress. Printed:

- ramp-up: from the workers' registration to every task running;
- lease slack: deadline - now on the database clock, the least over the running tasks,
  sampled every second from the ramp-up to the SIGTERM (never negative: no lease lapsed);
- false resets: TaskTimeout rows written while the tasks were held (0: no lease the monitor
  reset was still alive);
- worker RSS and threads (the most of any worker process), PostgreSQL CPU while holding (% of
  one core: this database's backends, and the whole server, which others may share);
- submit -> start of a probe task on another queue the same workers serve, p50/p99;
- one monitor pass (all its services) with the tasks held;
- cancel of --cancel running tasks (one statement) -> their handlers stopped, p50/p99;
- SIGTERM to every worker -> the workers exited, and -> every held task ready again (each
  worker yields its leases in one statement; the monitor's next pass makes them ready).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import postgres  # benchmarks/postgres.py, beside this script
from throughput import (
    BackendSampler,
    cpu_of_postgres,
    empty,
    percentile,
    postmaster_pid,
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_concurrent"
HOLD = "bench-hold"
START = "bench-start"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks held (default 20000)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes, 1-10 (default 4)")
    parser.add_argument(
        "--hold", type=float, default=60, help="seconds held before the probes (default 60)"
    )
    parser.add_argument(
        "--lease-length", default="60s", help="the workers' lease length (default 60s)"
    )
    parser.add_argument(
        "--step", type=float, default=30, help="seconds between a handler's wake-ups (default 30)"
    )
    parser.add_argument("--probes", type=int, default=40, help="probe tasks (default 40)")
    parser.add_argument("--cancel", type=int, default=1000, help="tasks cancelled (default 1000)")
    parser.add_argument(
        "--monitor-interval", type=float, default=5, help="the monitor's interval (default 5)"
    )
    args = parser.parse_args()
    if not 1 <= args.workers <= 10:
        parser.error("--workers must be from 1 to 10")
    if not 0 <= args.cancel < args.tasks:
        parser.error("--cancel must be under --tasks")
    postgres.setup(parser, DEFAULT_URL)
    Bench(args).run()


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.url = os.environ["DATABASE_URL"]
        self.tmp = Path(tempfile.mkdtemp(prefix="scylla-concurrent-"))
        self.stops = self.tmp / "stops"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []

    def run(self) -> None:
        args = self.args
        postgres.print_machine()
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        empty()
        postgres.seed_timed(self.submit, args.tasks)
        per_worker = math.ceil(args.tasks / args.workers)
        print(
            f"{args.tasks:,} held tasks on {args.workers} workers (--concurrency {per_worker + 1}, "
            f"lease {args.lease_length}), a wake-up every {args.step:g} s each",
            flush=True,
        )
        try:
            self.monitor = self.start("scylla_monitor", f"--interval={args.monitor_interval}")
            self.workers = [
                self.start(
                    "scylla_worker",
                    f"--queue={HOLD}",
                    f"--queue={START}",
                    f"--concurrency={per_worker + 1}",
                    f"--lease-length={args.lease_length}",
                    "--prefetch=0",
                    "--handlers=concurrent_tasks_handlers",
                )
                for _ in range(args.workers)
            ]
            self.measure()
        finally:
            for process in self.processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in self.processes:
                try:
                    process.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    process.kill()
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"logs in {self.tmp}")

    def submit(self, count: int) -> None:
        from scylla_django.models import Task

        spec = {"seconds": 24 * 3600, "step": self.args.step, "path": str(self.stops)}
        for chunk in range(0, count, 5000):
            size = min(5000, count - chunk)
            Task.objects.submit_many({"queue": HOLD, "spec": spec} for _ in range(size))

    def start(self, *command: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": self.url,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
        }
        log = open(self.tmp / f"{command[0]}-{len(self.processes)}.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), *command],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
        )
        self.processes.append(process)
        return process

    def measure(self) -> None:
        from django.db import connection

        from scylla_django.enums import EventType
        from scylla_django.models import History, Worker

        args = self.args
        pids = [p.pid for p in self.workers]
        wait_for(
            lambda: (
                Worker.objects.filter(pid__in=pids).count() == len(pids)
                or any(p.poll() is not None for p in self.workers)
            ),
            timeout=120,
            what="the workers to register",
        )
        if any(p.poll() is not None for p in self.workers):
            raise SystemExit(f"a worker exited; see the logs in {self.tmp}")
        started = time.monotonic()
        sampler = Sampler(pids)
        sampler.start()
        wait_for(
            lambda: running(HOLD) >= args.tasks, timeout=max(600, args.tasks / 50), what="all held"
        )
        ramp = time.monotonic() - started
        line("ramp-up: registered -> every task running", f"{ramp:.1f} s")

        postmaster = postmaster_pid()
        backends = BackendSampler()
        backends.start()
        cpu_before, clock_before = cpu_of_postgres(postmaster), time.monotonic()
        time.sleep(args.hold)
        window = time.monotonic() - clock_before
        server = (cpu_of_postgres(postmaster) - cpu_before) / window
        own = backends.finish() / window
        line(
            f"PostgreSQL CPU while holding ({args.hold:g} s)",
            f"{own * 100:.1f} % of a core (this database's backends; the whole server, "
            f"other databases included: {server * 100:.1f} %)",
        )

        starts = self.probe_latencies()
        line(
            "submit -> start of a probe task (another queue)",
            f"p50 {percentile(starts, 50):.0f} ms, p99 {percentile(starts, 99):.0f} ms "
            f"({len(starts)} probes)",
        )

        from scylla_django.monitor import Monitor

        monitor = Monitor(interval=args.monitor_interval)
        passes = []
        for _ in range(3):
            began = time.perf_counter()
            monitor.run_once()
            passes.append((time.perf_counter() - began) * 1000)
        monitor.stop_record()
        line(
            "one monitor pass (every service)",
            f"{statistics.median(passes):.0f} ms (of {', '.join(f'{p:.0f}' for p in passes)})",
        )

        stopped = self.cancel_latencies() if args.cancel else []
        if stopped:
            line(
                f"cancel of {args.cancel:,} running tasks -> handlers stopped",
                f"p50 {percentile(stopped, 50):.0f} ms, p99 {percentile(stopped, 99):.0f} ms",
            )
        false_resets = History.objects.filter(typ=EventType.TIMEOUT).count()
        sampler.finish()
        line("lease slack (deadline - now, least seen)", f"{sampler.slack:.1f} s")
        line("false resets (TaskTimeout rows)", f"{false_resets}")
        line(
            "worker RSS, threads (the most of one worker)",
            f"{sampler.rss / 2**20:.0f} MiB, {sampler.threads} threads",
        )

        held = args.tasks - args.cancel
        connection.close()
        began = time.monotonic()
        for process in self.workers:
            process.send_signal(signal.SIGTERM)
        for process in self.workers:
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGUSR1)  # a worker prints its threads' stacks
                time.sleep(1)
                raise SystemExit(f"a worker did not stop; see the logs in {self.tmp}") from None
        exited = time.monotonic() - began
        codes = sorted({p.returncode for p in self.workers})
        wait_for(lambda: ready(HOLD) >= held, timeout=300, what="every held task ready")
        line(
            "SIGTERM -> workers exited",
            f"{exited:.1f} s (exit codes {', '.join(map(str, codes))})",
        )
        line(f"SIGTERM -> all {held:,} tasks ready again", f"{time.monotonic() - began:.1f} s")
        false_resets = History.objects.filter(typ=EventType.TIMEOUT).count()
        line("false resets after the stop (TaskTimeout rows)", f"{false_resets}")

    def probe_latencies(self) -> list[float]:
        import random

        from scylla_django.enums import Status
        from scylla_django.models import Task

        found = []
        for _ in range(self.args.probes):
            time.sleep(random.uniform(0.05, 0.5))  # a random phase against the heartbeats
            submitted = time.time()
            task = Task.objects.submit(START, {})
            wait_for(
                lambda pk=task.pk: Task.objects.filter(pk=pk, status=Status.COMPLETED).exists(),
                timeout=60,
                what="the probe to complete",
                every=0.005,
            )
            task.refresh_from_db()
            found.append((task.result["started"] - submitted) * 1000)
        return found

    def cancel_latencies(self) -> list[float]:
        from scylla_django.models import Task

        chosen = list(
            Task.objects.filter(queue=HOLD, status="running")
            .order_by("?")
            .values_list("pk", flat=True)[: self.args.cancel]
        )
        rns = dict(Task.objects.filter(pk__in=chosen).values_list("rn", "pk"))
        cancelled = time.time()
        Task.objects.filter(pk__in=chosen).cancel()

        def lines() -> list[str]:
            return self.stops.read_text().splitlines() if self.stops.exists() else []

        wait_for(lambda: len(lines()) >= len(chosen), timeout=300, what="the cancelled to stop")
        stopped = (x.split() for x in lines())
        return [(float(t) - cancelled) * 1000 for rn, t in stopped if rn in rns]


class Sampler(threading.Thread):
    """Every second: the least lease slack of the running tasks (on its own connection), and
    the most RSS and threads of one worker process."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.slack = math.inf
        self.rss = 0
        self.threads = 0
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        from scylla_django.models import Task

        table = Task._meta.db_table
        url = os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
        with psycopg.connect(url, autocommit=True) as conn:
            while not self.done.wait(1.0):
                row = conn.execute(
                    f"SELECT extract(epoch FROM min(deadline) - clock_timestamp()) FROM {table} "
                    "WHERE status = 'running'"
                ).fetchone()
                if row and row[0] is not None:
                    self.slack = min(self.slack, float(row[0]))
                for pid in self.pids:
                    status = status_of(pid)
                    self.rss = max(self.rss, status.get("VmRSS", 0))
                    self.threads = max(self.threads, status.get("Threads", 0))

    def finish(self) -> None:
        self.done.set()
        self.join()


def status_of(pid: int) -> dict[str, int]:
    """VmRSS (bytes) and Threads of process `pid` from /proc (empty once it has exited)."""
    found = {}
    try:
        for text in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = text.partition(":")
            if key == "VmRSS":
                found[key] = int(value.split()[0]) * 1024
            elif key == "Threads":
                found[key] = int(value)
    except FileNotFoundError:
        pass
    return found


def running(queue: str) -> int:
    from scylla_django.models import Task

    return Task.objects.filter(queue=queue, status="running").count()


def ready(queue: str) -> int:
    from scylla_django.models import Task

    return Task.objects.filter(queue=queue, status="ready").count()


def line(what: str, value: str) -> None:
    print(f"{what:<52} {value}", flush=True)


if __name__ == "__main__":
    main()
