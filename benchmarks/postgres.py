"""What the PostgreSQL benchmarks share: a scratch database, Django set up and migrated."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def setup(parser: argparse.ArgumentParser, default_url: str) -> None:
    """Point Django at DATABASE_URL (default `default_url`), creating and migrating it."""
    os.environ.setdefault("DATABASE_URL", default_url)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    create_database(os.environ["DATABASE_URL"])

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor != "postgresql":
        parser.error("the benchmark needs PostgreSQL: set DATABASE_URL=postgres://...")
    call_command("migrate", verbosity=0)


def print_machine() -> None:
    """Print the line every figure stands under: CPUs, PostgreSQL's version and Django's."""
    import django
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        (version,) = cursor.fetchone() or ("?",)
    print(f"{os.cpu_count()} CPUs, PostgreSQL {version}, Django {django.get_version()}")


def spread(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    """A figure as the benchmarks print it: the median of `values`, then [min-max]."""
    return (
        f"{fmt.format(statistics.median(values))} "
        f"[{fmt.format(min(values))}-{fmt.format(max(values))}]"
    )


def seed_timed(seed: Callable[[int], object], tasks: int) -> None:
    """Run `seed(tasks)` and print how long it took."""
    started = time.perf_counter()
    seed(tasks)
    print(f"seeded {tasks:,} tasks in {time.perf_counter() - started:.1f} s")


def create_database(url: str) -> None:
    """Create the database named in `url` unless it exists."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def pgbench(
    script: str, *, transactions: int | None = None, seconds: float | None = None
) -> tuple[float, list[float]]:
    """Run `script` (pgbench's script language) with one client against DATABASE_URL, for
    `transactions` runs of it or for `seconds`, with prepared statements (as the app's hot
    statements are): its transactions per second, and each run's latency in milliseconds."""
    import re
    import shutil
    import subprocess
    import tempfile

    if shutil.which("pgbench") is None:
        raise SystemExit("pgbench is not on PATH (Debian: apt-get install postgresql-client)")
    parts = urlsplit(os.environ["DATABASE_URL"])
    with tempfile.TemporaryDirectory(prefix="scylla-pgbench-") as tmp:
        path = Path(tmp) / "script.sql"
        path.write_text(script)
        command = ["pgbench", "-n", "-M", "prepared", "-c", "1", "-f", str(path)]
        command += ["-t", str(transactions)] if transactions else ["-T", str(round(seconds or 5))]
        command += ["-l", "--log-prefix", str(Path(tmp) / "log")]
        command += ["-h", parts.hostname or "localhost", "-p", str(parts.port or 5432)]
        command += ["-U", parts.username or "postgres", parts.path.lstrip("/")]
        env = {**os.environ, "PGPASSWORD": parts.password or ""}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout)
        if done.returncode != 0 or match is None:
            raise SystemExit(f"pgbench failed:\n{done.stdout}\n{done.stderr}")
        latencies = [
            int(line.split()[2]) / 1000
            for log in Path(tmp).glob("log.*")
            for line in log.read_text().splitlines()
        ]
    return float(match.group(1)), latencies
