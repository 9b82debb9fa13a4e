"""Throughput and latency of real workers on PostgreSQL, each beside pgbench on the same server.

    python benchmarks/throughput.py                       # every figure, 5,000 tasks, 3 runs
    python benchmarks/throughput.py --only process --runs 5 --tasks 10000
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/scylla_bench_tp python benchmarks/throughput.py
    python benchmarks/throughput.py --private-cluster --only submit --only process

It creates and migrates the database named by DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/scylla_bench_throughput) and uses tests/settings.py (Django's
defaults: CONN_MAX_AGE 0). Workers are real `manage.py scylla_worker` processes loading
benchmarks/throughput_handlers.py; the submitting client is this process. The tables are emptied
before every run: point it at a scratch database. Figures (`--only`, repeatable):

- submit: `Task.objects.submit()` one task per call, 1 client; pgbench: single-INSERT
  transactions into a copy of the task table, 1 client.
- submit_many: `Task.objects.submit_many()` in batches of 1,000.
- process: --tasks no-op tasks submitted at once, done by --workers worker processes, with the
  default options and with `--concurrency 16 --poll-interval 0.1`; tasks/s from the first lease
  to the last completion on the database clock. pgbench: lease (SELECT … FOR UPDATE SKIP LOCKED +
  UPDATE + History INSERT, one transaction) then complete (fenced UPDATE + History INSERT,
  another) per task, one client per worker process. Also the CPU per task of the workers and of
  PostgreSQL (the whole server: cpu_of_postgres; this database's backends: BackendSampler), the
  statement time and connections per task from pg_stat_database, the statements (from
  pg_stat_statements, when the server loads it: --private-cluster makes one that does) and
  commits per task, and the connections each worker process holds.
- django_tasks: `noop_task.enqueue()` per call, beside native `submit()` per call in the same
  runs, then processing by the workers, beside native processing (as in `process`, default
  options) in the same runs (Django 6+).
- latency: submit -> handler start with one idle worker (default options), and cancel ->
  `ctx.check()` raising in a running handler.

Each figure is the median of --runs runs with the min-max in brackets.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import postgres  # benchmarks/postgres.py, beside this script
from postgres import spread

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_throughput"
FIGURES = ("submit", "submit_many", "process", "django_tasks", "latency")
FAST = ("--concurrency", "16", "--poll-interval", "0.1", "-v", "0")
TICKS = os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5_000, help="tasks per run (default 5000)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each figure (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--samples", type=int, default=40, help="latency samples per run (default 40)"
    )
    parser.add_argument(
        "--only", action="append", choices=FIGURES, help="only this figure (repeatable)"
    )
    parser.add_argument(
        "--private-cluster",
        action="store_true",
        help="run on a new PostgreSQL 15 cluster of its own, with pg_stat_statements loaded",
    )
    add_commit_option(parser)
    args = parser.parse_args()
    if args.tasks < 1 or args.runs < 1 or args.workers < 1 or args.samples < 1:
        parser.error("--tasks, --runs, --workers and --samples must be positive")
    if shutil.which("pgbench") is None:
        parser.error("pgbench is not on PATH (Debian: apt-get install postgresql-client)")
    if args.private_cluster:
        os.environ["DATABASE_URL"] = private_cluster(parser, args.synchronous_commit)
    elif args.synchronous_commit != "on":
        parser.error("--synchronous-commit needs --private-cluster")
    postgres.setup(parser, DEFAULT_URL)
    # The client submits before the workers start: each submission's warning that nothing
    # serves the queue yet would fill the page.
    logging.getLogger("scylla_django").setLevel(logging.ERROR)
    bench = Bench(args)
    print(bench.header())
    for figure in args.only or FIGURES:
        getattr(bench, figure)()


def add_commit_option(parser: argparse.ArgumentParser) -> None:
    """The `--synchronous-commit` option of the scripts that make a private cluster."""
    parser.add_argument(
        "--synchronous-commit",
        choices=("on", "off"),
        default="on",
        help="the private cluster's synchronous_commit (default on); off takes the disk's "
        "flush time out of every commit, to compare the CPU-bound rates of a day whose disk "
        "is slow",
    )


def private_cluster(parser: argparse.ArgumentParser, synchronous_commit: str = "on") -> str:
    """Make and start a PostgreSQL 15 cluster in a temporary directory, on a free port, with
    `pg_stat_statements` loaded and the server's defaults otherwise (fsync on; synchronous
    commit `synchronous_commit`, on by default); it is removed at exit. Returns the URL of its
    benchmark database."""
    import atexit

    sys.path.insert(0, str(ROOT))
    from tests import private_postgres

    why = private_postgres.available()
    if why is not None:
        parser.error(f"--private-cluster: {why}")

    class Cluster(private_postgres.PrivateCluster):
        def create(self) -> None:  # the database is made and migrated by postgres.setup()
            self._as_postgres(
                str(private_postgres.BIN / "initdb"), "-D", str(self.data), "-U", "postgres",
                "--auth=trust",
            )  # fmt: skip
            self.start()

        def start(self) -> None:
            options = (
                f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 "
                "-c shared_preload_libraries=pg_stat_statements "
                f"-c synchronous_commit={synchronous_commit}"
            )
            self._as_postgres(
                str(private_postgres.BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
                "-l", str(self.base / "log"), "-w", "-t", "60", "start",
            )  # fmt: skip

    cluster = Cluster("scylla_bench_throughput")
    atexit.register(cluster.destroy)
    cluster.create()
    return cluster.url


@dataclass
class Run:
    """One processing run: tasks/s and the costs per task."""

    rate: float
    worker_cpu: float  # ms of CPU of the worker processes
    postgres_cpu: float  # ms of CPU of the whole PostgreSQL server
    backend_cpu: float  # ms of CPU of this database's backends, sampled (a lower bound)
    sessions: float  # connections opened to the database
    statement_ms: float  # ms spent executing statements in the database (pg_stat_database)
    statements: float  # statements the workers ran (pg_stat_statements; NaN without it)
    commits: float  # transactions the workers committed (pg_stat_database)
    connections: float  # the most connections open at once, per worker process


class Bench:
    """One benchmark session: the database, the pgbench tables, the figures."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.tasks: int = args.tasks
        self.runs: int = args.runs
        self.workers: int = args.workers
        self.samples: int = args.samples
        self.url = os.environ["DATABASE_URL"]
        self.tmp = Path(tempfile.mkdtemp(prefix="scylla-throughput-"))
        create_pgbench_tables()

    def header(self) -> str:
        import django
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            version = cursor.fetchone()[0]
            cursor.execute("SHOW synchronous_commit")
            sync = cursor.fetchone()[0]
        return (
            f"PostgreSQL {version} (synchronous_commit {sync}), Django {django.get_version()}, "
            f"{os.cpu_count()} CPUs; {self.tasks:,} tasks, {self.workers} worker processes, "
            f"median of {self.runs} runs [min-max]"
        )

    # -- figures ------------------------------------------------------------------------------
    def submit(self) -> None:
        rates, limits = interleave(
            self.runs, lambda: self.submit_rate("bench-submit"), lambda: self.pgbench("insert", 1)
        )
        line("submit, one task per call", rates, "tasks/s", limits, "pgbench INSERT, 1 client")

    def submit_many(self) -> None:
        from scylla_django.models import Task

        def ours() -> float:
            empty()
            started = time.perf_counter()
            for chunk in range(0, self.tasks, 1000):
                size = min(1000, self.tasks - chunk)
                Task.objects.submit_many(
                    {"queue": "bench-submit", "spec": {"n": n}} for n in range(size)
                )
            return self.tasks / (time.perf_counter() - started)

        rates, _ = interleave(self.runs, ours, None)
        line("submit_many, batches of 1,000", rates, "tasks/s")

    def process(self) -> None:
        for label, options in (("default options", ()), (" ".join(FAST), FAST)):
            results: list[Run] = []
            limits: list[float] = []
            pg_cpu: list[float] = []
            backend_cpu: list[float] = []
            for _ in range(self.runs):
                results.append(self.process_once(options))
                limits.append(self.pgbench("lease_complete", self.workers))
                pg_cpu.append(self.pg_cpu_per_transaction)
                backend_cpu.append(self.backend_cpu_per_transaction)
            line(
                f"process no-op, {self.workers} workers, {label}",
                [r.rate for r in results],
                "tasks/s",
                limits,
                f"pgbench lease+complete, {self.workers} clients",
            )
            line("  worker CPU per task", [r.worker_cpu for r in results], "ms")
            line(
                "  PostgreSQL CPU per task (whole server)",
                [r.postgres_cpu * 1000 for r in results],
                "µs",
                [c * 1000 for c in pg_cpu],
                "pgbench's per lease+complete",
                ratio_format="{:.1f}x",
            )
            line(
                "  PostgreSQL CPU per task (this db's backends)",
                [r.backend_cpu * 1000 for r in results],
                "µs",
                [c * 1000 for c in backend_cpu],
                "pgbench's per lease+complete",
                ratio_format="{:.1f}x",
            )
            line(
                "  PostgreSQL statement time per task (this db)",
                [r.statement_ms for r in results],
                "ms",
            )
            line("  PostgreSQL sessions opened per task", [r.sessions for r in results], "")
            line("  statements per task (pg_stat_statements)", [r.statements for r in results], "")
            line("  commits per task (pg_stat_database)", [r.commits for r in results], "")
            line(
                "  connections open per worker process (most at once)",
                [r.connections for r in results],
                "",
            )

    def django_tasks(self) -> None:
        try:
            from throughput_handlers import noop_task  # type: ignore[attr-defined]
        except ImportError:
            print("django.tasks path: skipped (Django 6+ only)")
            return

        def enqueue() -> float:
            empty()
            started = time.perf_counter()
            for _ in range(self.tasks):
                noop_task.enqueue()
            return self.tasks / (time.perf_counter() - started)

        enqueued: list[float] = []
        submitted: list[float] = []
        processed: list[float] = []
        native: list[float] = []
        for _ in range(self.runs):
            # The native path beside each run: the ratios hold if the machine drifts.
            submitted.append(self.submit_rate("default"))
            enqueued.append(enqueue())
            processed.append(self.process_once((), queue="default", submit=False).rate)
            native.append(self.process_once(()).rate)
        line(
            "django.tasks enqueue, one per call",
            enqueued,
            "tasks/s",
            submitted,
            "native submit, same runs",
        )
        line(
            f"django.tasks processed, {self.workers} workers, defaults",
            processed,
            "tasks/s",
            native,
            "native processed, same runs",
        )

    def latency(self) -> None:
        starts: list[float] = []
        stops: list[float] = []
        for _ in range(self.runs):
            empty()
            with self.running_workers(1, (), queues=["bench-start", "bench-cancel"]):
                starts.extend(self.start_latencies())
                stops.extend(self.cancel_latencies())
        print(
            f"{'submit -> handler start, idle worker':<52} "
            f"p50 {percentile(starts, 50):7.1f} ms, p99 {percentile(starts, 99):7.1f} ms "
            f"({len(starts)} samples, default options)"
        )
        print(
            f"{'cancel -> ctx.check() raises':<52} "
            f"p50 {percentile(stops, 50):7.1f} ms, p99 {percentile(stops, 99):7.1f} ms "
            f"({len(stops)} samples, default options)"
        )

    # -- measurements -------------------------------------------------------------------------
    def submit_rate(self, queue: str) -> float:
        """Tasks/s of `Task.objects.submit()` in a loop, one task per call, on emptied tables."""
        from scylla_django.models import Task

        empty()
        started = time.perf_counter()
        for n in range(self.tasks):
            Task.objects.submit(queue, {"n": n})
        return self.tasks / (time.perf_counter() - started)

    def process_once(
        self, options: Sequence[str], queue: str = "bench-noop", submit: bool = True
    ) -> Run:
        """Run the workers over --tasks tasks and measure them.

        The queue is paused while the tasks go in and the workers start, and resumed once the
        counters are read: the window holds the workers' work and the few statements of this
        client's `Probe`, which are counted and taken off.
        """
        from django.db.models import Max, Min

        from scylla_django.enums import EventType
        from scylla_django.models import History, QueueSetting, Task

        if submit:
            empty()
        QueueSetting.objects.pause(queue)
        if submit:
            for chunk in range(0, self.tasks, 1000):
                size = min(1000, self.tasks - chunk)
                Task.objects.submit_many({"queue": queue, "spec": {}} for _ in range(size))
        postmaster = postmaster_pid()
        with self.running_workers(self.workers, options, queues=[queue]) as pids:
            window = Window(self.url, postmaster)
            workers = cpu_of(pids)
            window.probe.resume(queue)
            wait_for(
                lambda: window.probe.completed() >= self.tasks,
                timeout=max(300, self.tasks / 2),
                what=f"{self.tasks} completed tasks",
            )
            workers = cpu_of(pids) - workers
            server, backend = window.close()
        # The workers' backends have exited, and so reported their statistics: their stops and
        # last polls after the last completion are in the counts too (a few statements each).
        statements, commits, sessions, active = window.counted()
        QueueSetting.objects.filter(queue=queue).delete()
        first = History.objects.filter(typ=EventType.ASSIGNMENT).aggregate(t=Min("time"))["t"]
        last = Task.objects.aggregate(t=Max("updated"))["t"]
        span = (last - first).total_seconds()  # first lease to last completion, database clock
        return Run(
            rate=self.tasks / span,
            worker_cpu=workers * 1000 / self.tasks,
            postgres_cpu=server * 1000 / self.tasks,
            backend_cpu=backend * 1000 / self.tasks,
            sessions=sessions / self.tasks,
            statement_ms=active / self.tasks,
            statements=statements / self.tasks,
            commits=commits / self.tasks,
            connections=window.sampler.most / self.workers,
        )

    def start_latencies(self) -> list[float]:
        """Submit one task at a time to an idle worker; ms from submit to handler start."""
        import random

        from scylla_django.enums import Status
        from scylla_django.models import Task

        found = []
        for _ in range(self.samples):
            # A random phase against the worker's poll (1 s by default) and any timers.
            time.sleep(random.uniform(0.05, 1.05))
            submitted = time.time()
            task = Task.objects.submit("bench-start", {})
            wait_for(
                lambda pk=task.pk: Task.objects.filter(pk=pk, status=Status.COMPLETED).exists(),
                timeout=30,
                what="the task to complete",
                every=0.005,
            )
            task.refresh_from_db()
            found.append((task.result["started"] - submitted) * 1000)
        return found

    def cancel_latencies(self) -> list[float]:
        """Cancel a running handler that calls ctx.check() in a loop; ms until it raises."""
        import random

        from scylla_django.models import Task

        found = []
        for n in range(max(1, self.samples // 2)):
            path = self.tmp / f"cancel-{time.monotonic_ns()}-{n}"
            task = Task.objects.submit("bench-cancel", {"path": str(path), "limit": 60})
            wait_for(
                lambda path=path: path.exists(),
                timeout=30,
                what="the handler to start",
                every=0.005,
            )
            # A random phase against the heartbeats (every 3.3 s by default).
            time.sleep(random.uniform(0.05, 4.0))
            cancelled = time.time()
            task.cancel()
            wait_for(
                lambda path=path: "stopped" in path.read_text(),
                timeout=65,
                what="the handler to stop",
                every=0.005,
            )
            stopped = float(path.read_text().split("stopped ")[1].split()[0])
            found.append((stopped - cancelled) * 1000)
        return found

    @contextmanager
    def running_workers(
        self, count: int, options: Sequence[str], queues: Sequence[str]
    ) -> Iterator[list[int]]:
        """Start `count` scylla_worker processes; yield their pids once all have registered."""
        from scylla_django.models import Worker

        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": self.url,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
        }
        command = [sys.executable, str(ROOT / "manage.py"), "scylla_worker"]
        command += [f"--queue={queue}" for queue in queues]
        command += ["--handlers", "throughput_handlers", *options]
        processes = []
        logs = []
        try:
            for n in range(count):
                log = open(self.tmp / f"worker-{n}.log", "w")  # noqa: SIM115
                logs.append(log)
                processes.append(
                    subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
                )
            pids = [p.pid for p in processes]
            wait_for(
                lambda: (
                    Worker.objects.filter(pid__in=pids).count() == count
                    or any(p.poll() is not None for p in processes)
                ),
                timeout=60,
                what="the workers to register",
            )
            if any(p.poll() is not None for p in processes):
                raise SystemExit(f"a worker exited; see the logs in {self.tmp}")
            yield pids
        finally:
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
            for log in logs:
                log.close()

    def pgbench(self, script: str, clients: int) -> float:
        """The transactions/s of one pgbench script (see PGBENCH_SCRIPTS) at `clients` clients."""
        from django.db import connection

        path = self.tmp / f"{script}.sql"
        path.write_text(PGBENCH_SCRIPTS[script])
        per_client = max(1, self.tasks // clients)
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE pgbench_scylla_history, pgbench_scylla_task")
            if script == "lease_complete":
                cursor.execute(
                    "INSERT INTO pgbench_scylla_task (rn, queue, spec, priority, status, progress,"
                    " errors, leases, attempt, snoozes)"
                    " SELECT 'pg-' || g, 'bench', '{}', 0, 'ready', 0, '[]', 0, 0, 0"
                    " FROM generate_series(1, %s) AS g",
                    [per_client * clients],
                )
                cursor.execute("ANALYZE pgbench_scylla_task")
        parts = urlsplit(self.url)
        # Prepared statements, as the app's own hot statements are: the machine's limit.
        command = ["pgbench", "-n", "-M", "prepared", "-c", str(clients), "-j", str(clients)]
        command += ["-t", str(per_client)]
        command += ["-f", str(path), "-h", parts.hostname or "localhost"]
        command += ["-p", str(parts.port or 5432), "-U", parts.username or "postgres"]
        command += [parts.path.lstrip("/")]
        env = {**os.environ, "PGPASSWORD": parts.password or ""}
        sampler = BackendSampler()
        sampler.start()
        before = cpu_of_postgres()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        self.pg_cpu_per_transaction = (cpu_of_postgres() - before) * 1000 / (per_client * clients)
        self.backend_cpu_per_transaction = sampler.finish() * 1000 / (per_client * clients)
        match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout)
        if done.returncode != 0 or match is None:
            raise SystemExit(f"pgbench failed:\n{done.stdout}\n{done.stderr}")
        return float(match.group(1))


# Both approximate one task's data path: the same columns, indexes and constraints (copies of
# the task and History tables), the same conditions and History rows.
PGBENCH_SCRIPTS = {
    "insert": """\
INSERT INTO pgbench_scylla_task (rn, queue, spec, priority, status, progress, errors, leases,
  attempt, snoozes)
VALUES (gen_random_uuid()::text, 'bench', '{"n": 1}', 0, 'ready', 0, '[]', 0, 0, 0);
""",
    "lease_complete": """\
BEGIN;
WITH picked AS (
  SELECT id FROM pgbench_scylla_task
  WHERE status = 'ready' AND queue = 'bench' AND (not_before IS NULL OR not_before <= now())
  ORDER BY priority DESC, created, id LIMIT 1 FOR UPDATE SKIP LOCKED
)
UPDATE pgbench_scylla_task t SET status = 'running', owner = 'pgbench-' || :client_id,
  deadline = now() + interval '60 seconds', leases = t.leases + 1, updated = now()
FROM picked WHERE t.id = picked.id RETURNING t.id AS task_id \\gset
INSERT INTO pgbench_scylla_history (task_id, typ, worker, time)
VALUES (:task_id, 'TaskAssignment', 'pgbench-' || :client_id, now());
COMMIT;
BEGIN;
UPDATE pgbench_scylla_task SET status = 'completed', progress = 1, deadline = NULL,
  result = 'null', updated = now()
WHERE id = :task_id AND status = 'running' AND owner = 'pgbench-' || :client_id;
INSERT INTO pgbench_scylla_history (task_id, typ, worker, progress, time)
VALUES (:task_id, 'TaskCompletion', 'pgbench-' || :client_id, 1, now());
COMMIT;
""",
}


def create_pgbench_tables() -> None:
    """Copies of the task and History tables (columns, defaults, indexes, checks, the key)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS pgbench_scylla_history, pgbench_scylla_task")
        cursor.execute("CREATE TABLE pgbench_scylla_task (LIKE scylla_django_task INCLUDING ALL)")
        cursor.execute(
            "CREATE TABLE pgbench_scylla_history (LIKE scylla_django_history INCLUDING ALL)"
        )
        cursor.execute(
            "ALTER TABLE pgbench_scylla_history ADD FOREIGN KEY (task_id)"
            " REFERENCES pgbench_scylla_task (id) DEFERRABLE INITIALLY DEFERRED"
        )


def empty() -> None:
    """Delete every task, History row and worker row (and the rows that name them)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scylla_django_history, scylla_django_task, scylla_django_worker CASCADE"
        )


def cpu_of(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) used so far by the processes `pids`."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


class BackendSampler(threading.Thread):
    """Sum the CPU used by this database's backends (not ours), sampling /proc every 10 ms.

    A lower bound: a backend's CPU after its last sample, backends that lived less than 10 ms,
    and the server's own processes (WAL writer, checkpointer) are not counted. `most` is the
    most of them open at once. `own`: the pid of the measuring client's backend, left out
    (default: that of Django's connection).
    """

    def __init__(self, own: int | None = None, database: str | None = None) -> None:
        super().__init__(daemon=True)
        if own is None or database is None:
            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid(), current_database()")
                own, database = cursor.fetchone()
        self.own = own
        self.marker = f" {database} "
        self.postmaster = parent_of(self.own)
        self.first: dict[int, int] = {}  # pid -> CPU ns when first seen
        self.last: dict[int, int] = {}  # pid -> CPU ns when last seen
        self.others: set[int] = set()  # pids that are not this database's backends
        self.most = 0
        self.started = False
        self.done = threading.Event()

    def run(self) -> None:
        if self.postmaster is None:
            return
        while not self.done.is_set():
            self.sample()
            self.done.wait(0.01)

    def sample(self) -> None:
        children = Path(f"/proc/{self.postmaster}/task/{self.postmaster}/children").read_text()
        live = 0
        for pid in map(int, children.split()):
            if pid == self.own or pid in self.others:
                continue
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                # Nanoseconds on the CPU: /proc/<pid>/stat counts 10 ms ticks, which round a
                # short-lived backend's few milliseconds down to nothing.
                ns = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue
            if self.marker not in title:
                if "(" in title or "[local]" in title or "background" in title:
                    self.others.add(pid)  # another database's backend, or a server process
                continue
            # Backends that exist at the first sample count from then; later ones from birth.
            self.first.setdefault(pid, ns if not self.started else 0)
            self.last[pid] = ns
            live += 1
        self.most = max(self.most, live)
        self.started = True

    def finish(self) -> float:
        """Stop sampling; the CPU seconds used meanwhile (NaN if the server is remote)."""
        if self.postmaster is None:
            return math.nan
        self.done.set()
        self.join()
        self.sample()
        return sum(self.last[pid] - self.first[pid] for pid in self.last) / 1e9


def parent_of(pid: int) -> int | None:
    """The parent of a process on this machine; None if there is no such process here."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except FileNotFoundError:
        return None


def postmaster_pid() -> int | None:
    """The pid of the PostgreSQL server's postmaster; None if the server is on another
    machine."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    return parent_of(backend)  # the postmaster is the parent of our own backend


def cpu_of_postgres(postmaster: int | None = None) -> float:
    """CPU seconds used so far by the whole PostgreSQL server, exited backends included.

    The postmaster (the parent of every backend; looked up through Django's connection unless
    given) and its live children, plus the children it has reaped (cutime + cstime of the
    postmaster). Whatever else runs on the server is counted too. NaN when the server runs on
    another machine.
    """
    if postmaster is None:
        postmaster = postmaster_pid()
    if postmaster is None:
        return math.nan
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    total = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    for child in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split():
        try:
            stat = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile: its time moves to the postmaster's cutime
        total += sum(int(f) for f in stat[11:15])
    return total / TICKS


class Window:
    """What a processing run is measured over, alike for every queue measured: opened once the
    processes are up, closed once their work is done. It holds the whole server's CPU, this
    database's backends' CPU (`BackendSampler`) and `Probe`'s counters."""

    def __init__(self, url: str, postmaster: int | None) -> None:
        from django.db import connection

        connection.close()  # its statistics are flushed: none of its work is in the window
        time.sleep(0.2)  # its backend has exited
        self.postmaster = postmaster
        self.probe = Probe(url)
        self.sampler = BackendSampler(self.probe.pid, self.probe.database)
        self.sampler.start()
        self.cpu = cpu_of_postgres(postmaster)
        self.counters = self.probe.counters()

    def close(self) -> tuple[float, float]:
        """The CPU seconds the whole server and this database's backends used since the window
        opened."""
        return cpu_of_postgres(self.postmaster) - self.cpu, self.sampler.finish()

    def counted(self) -> tuple[float, float, float, float]:
        """`Probe.counters()` since the window opened, read once the processes' backends have
        exited and reported their statistics; the probe is closed."""
        time.sleep(0.5)
        counted = self.probe.counters()
        self.probe.close()
        statements, commits, sessions, active = (
            b - a for a, b in zip(self.counters, counted, strict=True)
        )
        return statements, commits, sessions, active


class Probe:
    """The measuring client's own connection (autocommit: one commit per statement) while the
    workers run: it resumes the queue, waits for the tasks and reads the counters, and counts
    its statements so that `counters()` leaves them out."""

    # The statements clients send: not transaction control (a commit is counted as one), nor
    # the foreign keys' checks that the server runs itself (`… FOR KEY SHARE OF x`).
    STATEMENTS = """
        SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND query !~* '^\\s*(BEGIN|COMMIT|ROLLBACK|START|SAVEPOINT|RELEASE)'
          AND query NOT LIKE 'SELECT $2 FROM ONLY % FOR KEY SHARE OF x'
    """

    def __init__(self, url: str) -> None:
        import psycopg

        self.connection = psycopg.connect(url.replace("postgres://", "postgresql://", 1))
        self.connection.autocommit = True
        self.sent = 0
        self.pid, self.database = self.query("SELECT pg_backend_pid(), current_database()")
        try:
            self.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self.query(self.STATEMENTS)
            self.statements = True
        except psycopg.Error:  # not in shared_preload_libraries: no statement counts
            self.statements = False

    def query(self, statement: str, params: Sequence[object] | None = None) -> tuple:
        self.sent += 1
        cursor = self.connection.execute(statement, params)  # type: ignore[arg-type]
        row = cursor.fetchone() if cursor.description is not None else None
        return tuple(row) if row is not None else ()

    def resume(self, queue: str) -> None:
        """Resume `queue` and wake the workers, in one statement."""
        from scylla_django.db import READY_CHANNEL
        from scylla_django.models import QueueSetting

        table = QueueSetting._meta.db_table
        self.query(
            f"WITH d AS (DELETE FROM {table} WHERE queue = %s RETURNING queue) "
            "SELECT count(pg_notify(%s, queue)) FROM d",
            [queue, READY_CHANNEL],
        )

    def completed(self) -> int:
        from scylla_django.models import Task

        table = Task._meta.db_table
        return int(self.query(f"SELECT count(*) FROM {table} WHERE status = 'completed'")[0])

    def counters(self) -> tuple[float, float, float, float]:
        """Statements run (NaN without pg_stat_statements) and transactions committed in this
        database, sessions opened and ms spent executing statements, less this probe's own
        statements and commits so far. The live backends' statistics reach these counters at
        most once a second, and at their exit; this probe's are flushed first."""
        self.query("SELECT pg_stat_force_next_flush()")  # at the end of this transaction
        self.query("SELECT pg_stat_clear_snapshot()")
        ours = self.sent  # this probe's statements so far (each one a commit)
        statements = float(self.query(self.STATEMENTS)[0]) - ours if self.statements else math.nan
        commits, sessions, active = self.query(
            "SELECT xact_commit, sessions, active_time FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        return statements, float(commits - ours), float(sessions), float(active)

    def close(self) -> None:
        self.connection.close()


def database_stats() -> tuple[int, float]:
    """This database's sessions opened so far and ms spent executing statements (all backends,
    exited ones included; a live backend reports at most once a second, and at exit)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT sessions, active_time FROM pg_stat_database WHERE datname = current_database()"
        )
        sessions, active = cursor.fetchone()
    return sessions, active


def interleave(
    runs: int, ours: Callable[[], float], theirs: Callable[[], float] | None
) -> tuple[list[float], list[float]]:
    """Alternate our measurement and pgbench's `runs` times."""
    rates: list[float] = []
    limits: list[float] = []
    for _ in range(runs):
        rates.append(ours())
        if theirs is not None:
            limits.append(theirs())
    return rates, limits


def wait_for(
    predicate: Callable[[], object], timeout: float, what: str, every: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank); the maximum when there are fewer than 100/(100-p)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def line(
    what: str,
    values: Sequence[float],
    unit: str,
    limits: Sequence[float] = (),
    limit_label: str = "",
    ratio_format: str = "{:.2f}",
) -> None:
    """Print a figure, and beside it the pgbench figure and the ratio of the medians."""
    fmt = "{:,.0f}" if unit.endswith("/s") or unit == "µs" else "{:.2f}"
    text = f"{what:<52} {spread(values, fmt):>22} {unit}"
    if limits:
        ratio = statistics.median(values) / statistics.median(limits)
        text += f"  | {limit_label}: {spread(limits, fmt)}, ratio {ratio_format.format(ratio)}"
    print(text, flush=True)


if __name__ == "__main__":
    main()
