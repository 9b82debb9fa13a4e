"""An M:N deployment across real network interfaces: four hosts (network namespaces, each with a
veth link to a private PostgreSQL), two workers on each and a monitor on two of them. One
host's link is cut for longer than the lease: its tasks are given back and finished on the
other hosts; when the link returns, its late outcomes and fenced effects are refused, nothing is
run twice to completion, and its workers go on taking tasks by themselves.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.ha.network import Hosts, allow_clients
from tests.ha.network import available as namespaces_unavailable
from tests.ha.ports import free_ports
from tests.private_postgres import PrivateCluster
from tests.private_postgres import available as cluster_unavailable
from tests.processes import finish, start, wait_until

# Its hosts run on a private PostgreSQL whatever DATABASE_URL says: PostgreSQL cells only.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.concurrency,
    pytest.mark.postgres,
    pytest.mark.timeout(240, func_only=True),
]

HOSTS = 4
CUT = 3  # the host whose link is cut
LEASE = 3.0
OUTAGE = 8.0  # longer than the lease and a monitor pass


@pytest.fixture
def hosts():
    reason = cluster_unavailable() or namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    made = Hosts(HOSTS)
    try:
        made.create()
        yield made
    finally:
        made.remove()


@pytest.fixture
def cluster(hosts):
    addresses = ",".join(["127.0.0.1", *hosts.server_ips])
    made = PrivateCluster(database="scylla_hosts", settings=(f"listen_addresses={addresses}",))
    [made.port] = free_ports(1, skip=4)
    made.url = f"postgres://postgres@127.0.0.1:{made.port}/{made.database}"
    try:
        made.create()
        allow_clients(made.data, hosts.subnet)
        made.query("SELECT pg_reload_conf()")
        yield made
    finally:
        made.destroy()


def submit(cluster: PrivateCluster, rows: list[tuple[str, dict]]) -> None:
    code = (
        "import json; from scylla_django.models import Task; Task.objects.submit_many("
        "{'queue': 'h-work', 'rn': rn, 'spec': spec} "
        f"for rn, spec in json.loads({json.dumps(rows)!r}))"
    )
    process = start("shell", "-c", code, env={"DATABASE_URL": cluster.url})
    status, output = finish(process, timeout=60)
    assert status == 0, output


def test_a_host_cut_off_past_its_leases_loses_nothing_and_runs_nothing_twice(
    hosts, cluster, tmp_path
):
    runs = tmp_path / "runs"
    runs.touch(mode=0o666)
    processes = []
    by_host: dict[int, list] = {}
    for n in range(HOSTS):
        env = {
            "DATABASE_URL": f"postgres://postgres@{hosts.server_ips[n]}:{cluster.port}/"
            f"{cluster.database}",
            "SCYLLA_TEST_HOST": f"h{n}",
        }
        workers = [
            hosts.start(
                n,
                "scylla_worker",
                "--queue=h-work",
                "--concurrency=2",
                "--prefetch=0",
                f"--lease-length={LEASE}s",
                "--heartbeat-interval=0.5",
                "--poll-interval=0.2",
                "--handlers=tests.ha.host_handlers",
                "-v",
                "2",
                env=env,
            )
            for _ in range(2)
        ]
        by_host[n] = workers
        processes += workers
        if n < 2:
            processes.append(hosts.start(n, "scylla_monitor", "--interval=0.5", "-v", "2", env=env))
    try:
        wait_until(
            lambda: (
                cluster.query("SELECT count(*) FROM scylla_django_worker WHERE stopped IS NULL")[0][
                    0
                ]
                == 2 * HOSTS
            ),
            # Ten Django processes starting at once: seconds on an idle machine, a minute or
            # more on a loaded one. The scenario's own waits, from here, total under 90 s.
            timeout=120,
            what="every worker registered",
        )
        pids = {w.pid: n for n, ws in by_host.items() for w in ws}
        names = {
            f"worker-{pk}": pids[pid]
            for pk, pid in cluster.query("SELECT id, pid FROM scylla_django_worker")
        }
        first = [
            (f"a-{i}", {"path": str(runs), "seconds": 3, "fenced": i % 2 == 0}) for i in range(32)
        ]
        submit(cluster, first)

        def held_by_cut() -> list[tuple[str, int]]:
            return [
                (rn, leases)
                for rn, owner, leases in cluster.query(
                    "SELECT rn, owner, leases FROM scylla_django_task WHERE status = 'running'"
                )
                if names.get(owner) == CUT
            ]

        wait_until(lambda: len(held_by_cut()) >= 2, timeout=20, what="the cut host busy")
        cut_at = time.monotonic()
        hosts.cut(CUT)
        try:
            wait_until(lambda: not held_by_cut(), timeout=OUTAGE, what="the cut host's tasks reset")
            reset_after = time.monotonic() - cut_at
            time.sleep(max(0.0, OUTAGE - (time.monotonic() - cut_at)))
        finally:
            hosts.restore(CUT)
        wait_until(
            lambda: (
                cluster.query("SELECT count(*) FROM scylla_django_task WHERE status = 'completed'")[
                    0
                ][0]
                == len(first)
            ),
            timeout=40,
            what="the first tasks completed",
        )
        # The cut host's workers come back by themselves and take tasks again.
        second = [(f"b-{i}", {"path": str(runs), "seconds": 0.5}) for i in range(48)]
        submit(cluster, second)
        wait_until(
            lambda: (
                cluster.query("SELECT count(*) FROM scylla_django_task WHERE status = 'completed'")[
                    0
                ][0]
                == len(first) + len(second)
            ),
            timeout=40,
            what="the second tasks completed",
        )
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        outputs = [finish(process, timeout=30) for process in processes]
        for code, output in outputs:
            print("=== exit", code, output[:1500], "\n...\n", output[-1500:])

    for code, output in outputs:
        assert code == 0, output
    print(f"the cut host's tasks were reset {reset_after:.1f}s after its link went down")
    lines = [line.split() for line in Path(runs).read_text().splitlines()]
    started = Counter((rn, host) for kind, rn, host, _ in lines if kind == "start")
    done = Counter(rn for kind, rn, _, _ in lines if kind == "done")
    results = {
        rn: (result, owner, leases)
        for rn, result, owner, leases in cluster.query(
            "SELECT rn, result, owner, leases FROM scylla_django_task"
        )
    }
    cut_host = f"h{CUT}"
    taken_over = [
        rn
        for (rn, host) in started
        if host == cut_host and rn.startswith("a-")
        if results[rn][0]["host"] != cut_host
    ]
    # The cut host had tasks running when its link went down; they were given back, run
    # again elsewhere and completed there: its own late outcomes were refused.
    assert len(taken_over) >= 2, (taken_over, started)
    for rn in taken_over:
        assert results[rn][2] >= 2
    # Nothing ran twice to completion: one fenced effect per fenced task, and the completion
    # of each task is its last owner's, one History completion per task.
    effects = Counter(name.split()[0] for (name,) in cluster.query("SELECT name FROM auth_group"))
    fenced = [rn for rn, spec in first if spec["fenced"]]
    assert {rn: effects[rn] for rn in fenced} == dict.fromkeys(fenced, 1)
    assert {rn: done[rn] for rn in fenced} == dict.fromkeys(fenced, 1)
    completions = Counter(
        rn
        for (rn,) in cluster.query(
            "SELECT t.rn FROM scylla_django_history h JOIN scylla_django_task t "
            "ON t.id = h.task_id WHERE h.typ = 'TaskCompletion'"
        )
    )
    assert set(completions.values()) == {1} and len(completions) == len(results)
    for rn, (result, owner, _) in results.items():
        assert result["worker"] == owner, rn
    # The cut host's workers recovered: they completed some of the second tasks.
    second_hosts = Counter(results[rn][0]["host"] for rn, _ in second)
    assert second_hosts[cut_host] > 0, second_hosts
