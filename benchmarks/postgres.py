"""What the PostgreSQL benchmarks share: a scratch database, Django set up and migrated."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
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
