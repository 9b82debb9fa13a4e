"""Failover with Patroni: a primary and a synchronous standby (PostgreSQL 15, Patroni, a
single-node etcd) serve a client, two workers and two monitors on a multi-host DSN
(`target_session_attrs=read-write`). The primary's host dies (Patroni, the postmaster and every
backend SIGKILLed at once); Patroni promotes the standby when the leader key expires.

Asserted: every acknowledged submission and every acknowledged outcome is on the new primary;
no task was held by two workers at once (the leases are longer than the failover, so none
expires); every process reconnected by itself and went on. Printed: the time from the kill to
the first lease and to the first acknowledged submission.

Opt-in (`-m failover`, or SCYLLA_TEST_FAILOVER=1): it needs Debian's patroni and etcd-server
and takes about a minute and a half. See docs/howto/deployment.md.
"""

from __future__ import annotations

import itertools
import re
import signal
import time
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest

from tests.ha.patroni import PatroniCluster, available
from tests.processes import finish, output_so_far, start, wait_until

pytestmark = [pytest.mark.failover, pytest.mark.slow, pytest.mark.concurrency]

LEASE = "30s"  # longer than the failover: no lease may expire because of it


@pytest.fixture
def patroni():
    reason = available()
    if reason:
        pytest.skip(reason)
    cluster = PatroniCluster()
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.stop()


def query(cluster: PatroniCluster, sql: str, *params: object) -> list[tuple]:
    with psycopg.connect(cluster.multi_dsn(), autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]


def test_a_killed_primary_loses_no_acknowledged_submission_or_outcome(patroni, tmp_path):
    cluster = patroni
    env = {"DATABASE_URL": cluster.url, "SCYLLA_TEST_PG_HOSTS": cluster.hosts}
    code, output = finish(start("migrate", "-v", "0", env=env), timeout=120)
    assert code == 0, output
    runs = tmp_path / "runs"
    runs.touch()
    worker_args = (
        "scylla_worker", "--queue=f-work", "--concurrency=4", f"--lease-length={LEASE}",
        "--heartbeat-interval=1", "--poll-interval=0.2", "--handlers=tests.ha.failover_handlers",
        "-v", "2",
    )  # fmt: skip
    workers = [start(*worker_args, env=env) for _ in range(2)]
    monitors = [start("scylla_monitor", "--interval=1", "-v", "2", env=env) for _ in range(2)]
    client = start(
        "shell", "-c", f"from tests.ha.failover_client import main; main({str(tmp_path)!r})",
        env=env,
    )  # fmt: skip
    processes = [*workers, *monitors, client]
    acks = tmp_path / "acks"
    finished: dict = {}
    try:
        wait_until(lambda: acked(acks) >= 100, timeout=60, what="submissions before the kill")
        wait_until(lambda: "completed" in output_so_far(workers[0]), timeout=30)
        killed = cluster.kill(0)
        acked_at_kill = acked(acks)
        wait_until(
            lambda: acked(acks) > acked_at_kill + 100, timeout=60, what="submissions after it"
        )
        # The first acknowledgement after the client saw the primary gone (one in flight at
        # the kill may be acknowledged just after it).
        failures = [float(t) for t in (tmp_path / "failures").read_text().split()]
        failed = min(t for t in failures if t > killed)
        first_submit = min(t for _, t in ack_lines(acks) if t > failed)
        wait_until(lambda: cluster.role(1) == "primary", timeout=10, what="node 1 promoted")
        (tmp_path / "stop").touch()
        finished[client] = code, output = finish(client, timeout=30)
        assert code == 0, output
        wait_until(
            lambda: (
                query(
                    cluster, "SELECT count(*) FROM scylla_django_task WHERE status <> 'completed'"
                )[0][0]
                == 0
            ),
            timeout=60,
            what="every task completed",
        )
        [(first_lease,)] = query(
            cluster,
            "SELECT extract(epoch FROM min(time)) FROM scylla_django_history "
            "WHERE typ = 'TaskAssignment' AND time > to_timestamp(%s)",
            killed,
        )
    finally:
        (tmp_path / "stop").touch()
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        outputs = [finished.get(p) or finish(p, timeout=30) for p in processes]
    print(
        f"\nfailover: first lease {float(first_lease) - killed:.1f}s and first acknowledged "
        f"submission {first_submit - killed:.1f}s after the primary was killed "
        f"(the client's first failure: {failed - killed:.2f}s) "
        f"(Patroni ttl {cluster.TTL}s); {acked(acks)} submissions acknowledged"
    )
    for code, output in outputs:
        assert code == 0, output

    # Every acknowledged submission survived, and completed.
    tasks = dict(query(cluster, "SELECT rn, status FROM scylla_django_task"))
    assert all(tasks.get(rn) == "completed" for rn, _ in ack_lines(acks))
    # Every acknowledged outcome survived.
    for _, output in outputs[:2]:
        for rn in re.findall(r"worker-\d+ completed (\S+) ", output):
            assert tasks[rn] == "completed", rn
    # No task was held by two workers at once; none was taken away (no lease expired).
    assert query(cluster, "SELECT count(*) FROM scylla_django_task WHERE leases > 1") == [(0,)]
    assert_no_overlap(runs)
    # Every process reconnected by itself: each worker leased and each monitor made a pass
    # after the failover.
    for _, output in outputs[:4]:
        assert after(output, killed), output[-3000:]


def ack_lines(path: Path) -> list[tuple[str, float]]:
    return [(rn, float(t)) for rn, t in (line.split() for line in path.read_text().splitlines())]


def acked(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def assert_no_overlap(runs: Path) -> None:
    spans: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    starts: dict[tuple[str, str, str], float] = {}
    for kind, rn, worker, lease, at in (line.split() for line in runs.read_text().splitlines()):
        if kind == "start":
            starts[rn, worker, lease] = float(at)
        else:
            spans[rn].append((starts.pop((rn, worker, lease)), float(at), worker))
    for rn, held in spans.items():
        held.sort()
        for (_, end, worker), (begin, _, other) in itertools.pairwise(held):
            assert end <= begin, f"{rn} held by {worker} and {other} at once"


TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*(leased|expired|reset)", re.M)


def after(output: str, moment: float) -> bool:
    """Whether a process logged a lease (a worker) or a pass (a monitor) after `moment`."""
    for stamp, _ in TIMESTAMP.findall(output):
        if time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) > moment:
            return True
    return False
