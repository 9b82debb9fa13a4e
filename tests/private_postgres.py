"""A private PostgreSQL cluster for fault tests: started, stopped and restarted by its own PID.

Built with Debian's PostgreSQL 15 `initdb` as the `postgres` user in a temporary directory, on a
free port of its own, so that a test can take the database away without touching the shared
server.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

from tests.processes import ROOT, child_env

BIN = Path("/usr/lib/postgresql/15/bin")


def available() -> str | None:
    """Why a private cluster cannot be made here, or None if it can."""
    if not (BIN / "initdb").exists():
        return "PostgreSQL 15 binaries are not installed"
    if os.geteuid() != 0:
        return "creating a cluster as the postgres user needs root"
    if shutil.which("runuser") is None:
        return "runuser is missing"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """One throw-away cluster with one migrated database, `url`."""

    def __init__(
        self,
        database: str = "scylla_worker_faults",
        settings: Sequence[str] = (),
        port: int | None = None,
    ) -> None:
        self.settings = tuple(settings)  # "name=value" server settings, as `-c` options
        self.base = Path(tempfile.mkdtemp(prefix="scylla-worker-pg-"))
        self.data = self.base / "data"
        self.port = port or free_port()
        self.database = database
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/{database}"
        shutil.chown(self.base, "postgres", "postgres")

    def _as_postgres(self, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )

    def create(self) -> None:
        self._as_postgres(
            str(BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N"
        )
        self.start()
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        env = {**child_env(), "DATABASE_URL": self.url}
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=120,
        )

    def dsn(self, database: str | None = None) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database or self.database}"

    def start(self) -> None:
        options = (
            # fsync off is safe here: an immediate shutdown loses no committed transaction
            # (the WAL is in the page cache), only a machine crash would.
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off"
        )
        options += "".join(f" -c {setting}" for setting in self.settings)
        self._as_postgres(
            str(BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
            str(self.base / "log"), "-w", "-t", "60", "start",
        )  # fmt: skip

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        """Immediate shutdown (SIGQUIT to the postmaster): clients see the server vanish."""
        pid = self.pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGQUIT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise AssertionError(f"the private PostgreSQL (pid {pid}) did not stop")

    def accepting(self) -> bool:
        try:
            with psycopg.connect(self.dsn(), connect_timeout=1):
                return True
        except psycopg.OperationalError:
            return False

    def query(self, sql: str, *params: object) -> list[tuple]:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)
