"""Our workers beside PgQueuer's, each at its defaults, on one private PostgreSQL cluster.

    python benchmarks/beside_pgqueuer.py [--tasks 5000] [--runs 3] [--workers 2]

The same runs, interleaved: --tasks no-op tasks done by --workers `scylla_worker` processes
(default options; as throughput.py's `process` figure), then --tasks no-op jobs done by
--workers consumers of PgQueuer (benchmarks/pgqueuer_consumer.py: `pgq run`'s defaults, asyncpg
as in its quick start, in drain mode so that each exits once the queue is empty), then
pgbench's lease+complete at --workers clients (throughput.py's script), the machine's limit.
Each side's tasks are all in the database before its processes start. Printed for each side:
tasks/s (first start to last completion, on the database clock: our History, PgQueuer's log),
PostgreSQL CPU per task (the whole server, and this database's backends), statements per task
(pg_stat_statements) and commits per task, from the start of the processes to their last
completion (ours) or exit (PgQueuer's: their start-up and their last empty polls are in), and
the CPU of the worker processes per task (ours from their registration, PgQueuer's as the
kernel reports it when they are reaped, start-up included). Then each of our figures as a
ratio to PgQueuer's.

PgQueuer runs in a virtualenv of its own, `.venvs/pgqueuer` (made on first use from
requirements/pgqueuer.txt with this interpreter), or the one whose Python `--pgqueuer-python`
names.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import postgres  # benchmarks/postgres.py, beside this script
import throughput  # benchmarks/throughput.py: the cluster, our runs, the probes
from throughput import Run, line

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
VENV = ROOT / ".venvs" / "pgqueuer"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5_000, help="tasks per run (default 5000)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="processes per side (default 2)")
    parser.add_argument(
        "--pgqueuer-python", type=Path, help="the Python of a virtualenv with PgQueuer"
    )
    throughput.add_commit_option(parser)
    args = parser.parse_args()
    if args.tasks < 1 or args.runs < 1 or args.workers < 1:
        parser.error("--tasks, --runs and --workers must be positive")
    python = args.pgqueuer_python or pgqueuer_virtualenv()
    url = throughput.private_cluster(parser, args.synchronous_commit)
    os.environ["DATABASE_URL"] = url
    postgres.setup(parser, throughput.DEFAULT_URL)
    # Our tasks go in before our workers start: no warning that nothing serves their queue yet.
    logging.getLogger("scylla_django").setLevel(logging.ERROR)
    theirs = PgQueuer(python, url.replace("postgres://", "postgresql://", 1), args.workers)
    theirs.install()
    bench = throughput.Bench(argparse.Namespace(samples=1, **vars(args)))
    print(bench.header() + f"; PgQueuer {theirs.version()}")

    ours: list[Run] = []
    pgqueuer: list[Run] = []
    limits: list[float] = []
    for _ in range(args.runs):
        ours.append(bench.process_once(()))
        pgqueuer.append(theirs.process_once(args.tasks))
        limits.append(bench.pgbench("lease_complete", args.workers))
    label = f"pgbench lease+complete, {args.workers} clients"
    for side, runs in (("ours", ours), ("PgQueuer", pgqueuer)):
        who = "workers, default options" if side == "ours" else "consumers, defaults"
        line(f"{side}, {args.workers} {who}", [r.rate for r in runs], "tasks/s", limits, label)
    figures: Sequence[tuple[str, Callable[[Run], float], str]] = (
        ("tasks/s", lambda r: r.rate, "tasks/s"),
        ("client CPU per task", lambda r: r.worker_cpu, "ms"),
        ("PostgreSQL CPU per task (whole server)", lambda r: r.postgres_cpu * 1000, "µs"),
        ("PostgreSQL CPU per task (this db's backends)", lambda r: r.backend_cpu * 1000, "µs"),
        ("statements per task (pg_stat_statements)", lambda r: r.statements, ""),
        ("commits per task (pg_stat_database)", lambda r: r.commits, ""),
    )
    for what, value, unit in figures[1:]:
        line(f"ours: {what}", [value(r) for r in ours], unit)
        # PgQueuer's consumers are measured from their start: their start-up is in the figure.
        also = " (with start-up)" if what == "client CPU per task" else ""
        line(f"PgQueuer: {what}{also}", [value(r) for r in pgqueuer], unit)
    for what, value, _ in figures:
        ratio = statistics.median(map(value, ours)) / statistics.median(map(value, pgqueuer))
        print(f"ours / PgQueuer, {what}: {ratio:.2f}")


def pgqueuer_virtualenv() -> Path:
    """The Python of `.venvs/pgqueuer`, made with PgQueuer installed if it is missing."""
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"making {VENV} (requirements/pgqueuer.txt)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        requirements = ROOT / "requirements" / "pgqueuer.txt"
        install = [str(python), "-m", "pip", "install", "--quiet", "-r", str(requirements)]
        subprocess.run(install, check=True)
    return python


class PgQueuer:
    """PgQueuer's side: its schema in the benchmark database, its jobs, its consumers."""

    def __init__(self, python: Path, dsn: str, consumers: int) -> None:
        self.python = python
        self.pgq = python.parent / "pgq"
        self.url = dsn
        self.consumers = consumers
        self.env = {**os.environ, "PGQUEUER_BENCH_DSN": dsn, "PYTHONPATH": str(HERE)}
        self.logs = Path(tempfile.mkdtemp(prefix="pgqueuer-"))

    def version(self) -> str:
        asked = "import importlib.metadata as m; print(m.version('pgqueuer'))"
        done = subprocess.run(
            [str(self.python), "-c", asked], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def install(self) -> None:
        """Install PgQueuer's tables, as its `pgq install` does."""
        command = [str(self.pgq), "--pg-dsn", self.url, "install"]
        subprocess.run(command, env=self.env, check=True, capture_output=True)

    def process_once(self, tasks: int) -> Run:
        """Enqueue `tasks` jobs, then run the consumers until each has found the queue empty
        and exited; measured from their start, over the window our runs are measured over."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
        enqueue = [str(self.python), str(HERE / "pgqueuer_consumer.py"), "enqueue", str(tasks)]
        subprocess.run(enqueue, env=self.env, check=True)
        window = throughput.Window(self.url, throughput.postmaster_pid())
        command = [str(self.python), str(HERE / "pgqueuer_consumer.py"), "drain"]
        worker_cpu = 0.0
        processes = []
        for n in range(self.consumers):
            log = open(self.logs / f"consumer-{n}.log", "w")  # noqa: SIM115
            process = subprocess.Popen(command, cwd=HERE, env=self.env, stdout=log, stderr=log)
            processes.append((process, log))
        for process, log in processes:
            # Their CPU, start-up included, as the kernel reports it when each is reaped.
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            log.close()
            if process.returncode != 0:
                raise SystemExit(f"a PgQueuer consumer exited {process.returncode}: {log.name}")
            worker_cpu += usage.ru_utime + usage.ru_stime
        server, backend = window.close()
        left, done, span = window.probe.query(
            "SELECT (SELECT count(*) FROM pgqueuer),"
            " count(*) FILTER (WHERE status = 'successful'),"
            " extract(epoch FROM max(created) - min(created) FILTER (WHERE status = 'picked'))"
            " FROM pgqueuer_log WHERE status <> 'queued'"
        )
        statements, commits, sessions, active = window.counted()
        if left or done != tasks:
            raise SystemExit(f"PgQueuer left {left} jobs and logged {done} of {tasks} done")
        return Run(
            rate=tasks / float(span),
            worker_cpu=worker_cpu * 1000 / tasks,
            postgres_cpu=server * 1000 / tasks,
            backend_cpu=backend * 1000 / tasks,
            sessions=sessions / tasks,
            statement_ms=active / tasks,
            statements=statements / tasks,
            commits=commits / tasks,
            connections=window.sampler.most / self.consumers,
        )


if __name__ == "__main__":
    main()
