"""`SCYLLA["READ_DATABASE"]`: a real primary and its streaming replica (`pg_basebackup -R`).

The admin's pages and the API's GETs read the replica (they lag while its replay is paused);
submissions, leases, transitions and the monitor go to the primary, and the replica, read-only,
would refuse any write. The Django side runs in `tests/replica_child.py`, configured with the
two aliases.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.private_postgres import BIN, PrivateCluster, available
from tests.processes import ROOT, child_env

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

PRIMARY_PORT = 55440
REPLICA_PORT = 55441


class Replica(PrivateCluster):
    """A streaming replica of `primary`, made by `pg_basebackup -R` (standby.signal and
    primary_conninfo written for it)."""

    def create_from(self, primary: PrivateCluster) -> None:
        self._as_postgres(
            str(BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port),
            "-U", "postgres", "-D", str(self.data), "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        self.start()


@pytest.fixture
def clusters():
    reason = available()
    if reason:
        pytest.skip(reason)
    primary = PrivateCluster("scylla_rep_reads", port=PRIMARY_PORT)
    replica = Replica("scylla_rep_reads", port=REPLICA_PORT)
    try:
        primary.create()
        replica.create_from(primary)
        yield primary, replica
    finally:
        replica.destroy()
        primary.destroy()


def test_reads_go_to_the_replica_and_writes_to_the_primary(clusters):
    primary, replica = clusters
    env = {
        **child_env(),
        "DATABASE_URL": primary.url,
        "SCYLLA_TEST_DATABASES": json.dumps({"replica": replica.url}),
        "SCYLLA_TEST_SETTINGS": json.dumps({"READ_DATABASE": "replica"}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.replica_child"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")
    # Nothing was written on the replica: it is a standby still, and it refuses writes.
    assert replica.query("SELECT pg_is_in_recovery()") == [(True,)]
