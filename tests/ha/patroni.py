"""A two-node PostgreSQL cluster managed by Patroni with a single-node etcd (Debian's `patroni`
and `etcd-server`, PostgreSQL 15's binaries), in a temporary directory on private ports: a
primary and a synchronous standby that Patroni promotes when the primary is gone.

Every process is started here and stopped by its PID (`stop()`), with what it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import psycopg

from tests.ha.ports import free_ports
from tests.private_postgres import BIN
from tests.processes import descendants, signal_each

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
PATRONI = shutil.which("patroni") or "/usr/bin/patroni"


def available() -> str | None:
    """Why the cluster cannot be built here, or None if it can."""
    if not (BIN / "initdb").exists():
        return "PostgreSQL 15 binaries are not installed"
    if os.geteuid() != 0:
        return "running PostgreSQL and Patroni as the postgres user needs root"
    for binary, package in ((ETCD, "etcd-server"), (PATRONI, "patroni")):
        if not os.path.exists(binary):
            return f"{binary} is missing (Debian: apt-get install {package})"
    return None


class PatroniCluster:
    """etcd, then nodes 0 and 1 (0 bootstraps and leads; 1 replicates from it, synchronously)."""

    TTL = 10  # seconds before a vanished leader's key expires and the standby takes over

    def __init__(self, database: str = "scylla_failover") -> None:
        self.base = Path(tempfile.mkdtemp(prefix="scylla-patroni-"))
        shutil.chown(self.base, "postgres", "postgres")
        etcd_client, etcd_peer, *rest = free_ports(6, skip=10)
        self.etcd_client, self.etcd_peer = etcd_client, etcd_peer
        self.pg_ports = rest[:2]
        self.api_ports = rest[2:]
        self.database = database
        self.etcd: subprocess.Popen | None = None
        self.nodes: dict[int, subprocess.Popen] = {}

    # -- addresses

    @property
    def hosts(self) -> str:
        """Both servers, for SCYLLA_TEST_PG_HOSTS (libpq's multi-host list)."""
        return ",".join(f"127.0.0.1:{port}" for port in self.pg_ports)

    @property
    def url(self) -> str:
        """The database on node 0, as a DATABASE_URL (the hosts are given apart)."""
        return f"postgres://postgres@127.0.0.1:{self.pg_ports[0]}/{self.database}"

    def dsn(self, node: int, database: str | None = None) -> str:
        return (
            f"host=127.0.0.1 port={self.pg_ports[node]} user=postgres "
            f"dbname={database or self.database} connect_timeout=2"
        )

    def multi_dsn(self) -> str:
        ports = ",".join(map(str, self.pg_ports))
        return (
            f"host=127.0.0.1,127.0.0.1 port={ports} user=postgres dbname={self.database} "
            "target_session_attrs=read-write connect_timeout=2"
        )

    # -- processes

    def start_etcd(self) -> None:
        data = self.base / "etcd"
        client = f"http://127.0.0.1:{self.etcd_client}"
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        self.etcd = subprocess.Popen(
            [
                ETCD, "--name", "scyha", "--data-dir", str(data),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"scyha={peer}",
            ],
            stdout=(self.base / "etcd.log").open("w"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._wait(lambda: self._get(f"{client}/health") is not None, 20, "etcd")

    def config(self, node: int) -> dict:
        data = self.base / f"node{node}"
        return {
            "scope": f"scyha{os.getpid()}",
            "name": f"node{node}",
            "restapi": {
                "listen": f"127.0.0.1:{self.api_ports[node]}",
                "connect_address": f"127.0.0.1:{self.api_ports[node]}",
            },
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_client}"},
            "bootstrap": {
                "dcs": {
                    "ttl": self.TTL,
                    "loop_wait": 1,
                    "retry_timeout": 4,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": False,
                        "parameters": {
                            "synchronous_commit": "on",
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "wal_keep_size": "128MB",
                            "max_connections": 100,
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
                "pg_hba": [
                    "local all all trust",
                    "host replication postgres 127.0.0.1/32 trust",
                    "host all all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_ports[node]}",
                "connect_address": f"127.0.0.1:{self.pg_ports[node]}",
                "data_dir": str(data),
                "bin_dir": str(BIN),
                "pgpass": str(self.base / f"pgpass{node}"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(self.base)},
                # Not a spread checkpoint: the standby's copy starts at once.
                "basebackup": [{"checkpoint": "fast"}],
                "pg_hba": [
                    "local all all trust",
                    "host replication postgres 127.0.0.1/32 trust",
                    "host all all 127.0.0.1/32 trust",
                ],
            },
        }

    def start_node(self, node: int) -> None:
        path = self.base / f"node{node}.yml"
        path.write_text(json.dumps(self.config(node)))  # JSON is YAML
        shutil.chown(path, "postgres", "postgres")
        self.nodes[node] = subprocess.Popen(
            [PATRONI, str(path)],
            user="postgres",
            group="postgres",
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(self.base), "LANG": "C.UTF-8"},
            cwd=self.base,
            stdout=(self.base / f"patroni{node}.out").open("w"),
            stderr=subprocess.STDOUT,
        )

    def create(self) -> None:
        """etcd, the primary, the database, the synchronous standby."""
        self.start_etcd()
        self.start_node(0)
        self._wait(lambda: self.role(0) == "primary", 60, "node 0 leading")
        with psycopg.connect(self.dsn(0, "postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        self.start_node(1)
        self._wait(self.synchronous, 60, "node 1 a synchronous standby")

    def role(self, node: int) -> str | None:
        status = self._get(f"http://127.0.0.1:{self.api_ports[node]}/patroni")
        if not status or status.get("state") != "running":
            return None
        return "primary" if status.get("role") in ("master", "primary") else status.get("role")

    def synchronous(self) -> bool:
        try:
            with psycopg.connect(self.dsn(0, "postgres"), autocommit=True) as conn:
                rows = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchall()
        except psycopg.Error:
            return False
        return ("sync",) in rows

    def kill(self, node: int) -> float:
        """SIGKILL Patroni and its PostgreSQL (postmaster and backends) at once: the host is
        gone, nothing shuts down cleanly. Returns when (time.time()) they were killed."""
        process = self.nodes[node]
        pids = [process.pid, *descendants(process.pid), *self._postgres(node)]
        killed = time.time()
        signal_each(pids, signal.SIGKILL)
        process.wait()
        return killed

    def _postgres(self, node: int) -> list[int]:
        try:
            pid = int((self.base / f"node{node}" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        return [pid, *descendants(pid)]

    def stop(self) -> None:
        for node, process in self.nodes.items():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # Patroni stops its PostgreSQL
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=30)
            signal_each([process.pid, *descendants(process.pid), *self._postgres(node)], 9)
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.kill()
            self.etcd.wait()
        shutil.rmtree(self.base, ignore_errors=True)

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}"
            for path in sorted(self.base.glob("*.out")) + sorted(self.base.glob("*.log"))
        )

    # -- helpers

    @staticmethod
    def _get(url: str) -> dict | None:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return json.loads(response.read())
        except (OSError, ValueError):
            return None

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.logs()}")
