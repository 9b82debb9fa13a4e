"""A private PgBouncer for the tests: Debian's `pgbouncer`, run as the `postgres` user on a free
port of its own, in front of a PostgreSQL server, started and stopped by its own PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.ha.ports import free_ports

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def available() -> str | None:
    """Why a PgBouncer cannot be started here, or None if it can."""
    if not os.path.exists(BINARY):
        return "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
    if os.geteuid() != 0:
        return "running pgbouncer as the postgres user needs root"
    return None


def version() -> tuple[int, ...]:
    out = subprocess.run([BINARY, "--version"], capture_output=True, text=True, check=True)
    return tuple(int(part) for part in out.stdout.split()[1].split("."))


class PgBouncer:
    """One pooler on 127.0.0.1:`port` for every database of the server at `host`:`server_port`,
    logging in as `postgres` (auth_type any: the local server trusts it)."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        server_port: int = 5432,
        pool_mode: str = "transaction",
        pool_size: int = 3,
    ) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="scylla-pgbouncer-"))
        [self.port] = free_ports(1)
        self.process: subprocess.Popen | None = None
        config = f"""\
[databases]
* = host={host} port={server_port} user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = any
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 500
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
logfile = {self.base}/pgbouncer.log
"""
        (self.base / "pgbouncer.ini").write_text(config)
        shutil.chown(self.base, "postgres", "postgres")

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [BINARY, str(self.base / "pgbouncer.ini")],
            user="postgres",
            group="postgres",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"pgbouncer exited:\n{self.log()}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError(f"pgbouncer did not listen on {self.port}:\n{self.log()}")

    def log(self) -> str:
        try:
            return (self.base / "pgbouncer.log").read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # PgBouncer: shut down at once
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.base, ignore_errors=True)
