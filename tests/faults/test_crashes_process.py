"""What a crash costs, with real worker processes (docs/howto/crashes.md): a poison pill whose
handler kills its worker process, beside normal tasks in the same queue, at the worker's
defaults (concurrency 1, prefetch 64, the 10 s lease) and the monitor's. The pill is aborted
`max_leases_exceeded` after `MAX_LEASES` runs of its own; every normal task completes, none is
aborted, and none that a crash stranded (leased beside the pill, not started) waited a lease
length to be made ready again."""

from __future__ import annotations

import json
import signal
from collections import Counter
from datetime import timedelta
from itertools import pairwise

import pytest

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from tests.processes import finish, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

MAX_LEASES = 3
LEASE = timedelta(seconds=10)  # the default lease length


def run_beside_a_pill(
    tmp_path, normal: int, lease: timedelta | None = None
) -> dict[str, list[int]]:
    """Run `normal` tasks and a poison pill in one queue with two worker processes (a parent
    that replaces a child killed by the pill) and a monitor, at their defaults (but the lease
    length, if `lease`), until every task is final; return the handler starts of each rn (the
    lease number of each run)."""
    path = tmp_path / "starts.log"
    # The pill and ten normal tasks come first (a higher priority), the pill among them: a
    # lease takes them together, and after a crash they are the first ready again, so the
    # same tasks come along with the pill lease after lease.
    first = [f"n{n}" for n in range(5)] + ["pill"] + [f"n{n}" for n in range(5, 10)]
    items = [
        {"queue": "t-poison", "rn": rn, "priority": 5, "spec": {"path": str(path)}} for rn in first
    ]
    items[5]["spec"] = {"path": str(path), "poison": True}
    items += [
        {"queue": "t-poison", "rn": f"n{n}", "spec": {"path": str(path)}} for n in range(10, normal)
    ]
    assert all(o.outcome == "inserted" for o in Task.objects.submit_many(items))
    env = {"SCYLLA_TEST_SETTINGS": json.dumps({"MAX_LEASES": MAX_LEASES})}
    processes = [
        start(
            "scylla_worker",
            "--queue=t-poison",
            "--processes=2",
            "--handlers=tests.worker_handlers",
            *([f"--lease-length={lease.total_seconds():g}s"] if lease else []),
            # a short lease's reservation is half of it when heartbeats come often enough
            *([f"--heartbeat-interval={lease.total_seconds() / 8:g}"] if lease else []),
            "-v",
            "2",
            env=env,
        ),
        start("scylla_monitor", "-v", "2", env=env),
    ]
    try:
        wait_until(
            lambda: not Task.objects.filter(status__in=[Status.READY, Status.RUNNING]).exists(),
            timeout=180,
            what="every task final",
        )
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        results = [finish(process) for process in processes]
    for code, output in results:
        assert code == 0, output
    starts: dict[str, list[int]] = {}
    for line in path.read_text().splitlines():
        rn, lease = line.split()
        starts.setdefault(rn, []).append(int(lease))
    return starts


def assert_only_the_pill_paid(
    starts: dict[str, list[int]], normal: int, lease: timedelta = LEASE
) -> None:
    pill = Task.objects.get(rn="pill")
    assert pill.status == Status.ABORTED
    assert [e["code"] for e in pill.errors] == ["max_leases_exceeded"]
    # Its first run was not known to have started (it killed its worker before a heartbeat
    # could tell); each later run recorded its start first; the first counted once they had.
    assert starts["pill"] == list(range(1, MAX_LEASES + 1))
    assert pill.leases == MAX_LEASES and pill.unstarted == 1

    tasks = Task.objects.exclude(rn="pill")
    assert Counter(tasks.values_list("status", flat=True)) == {Status.COMPLETED: normal}
    assert set(starts) == {*tasks.values_list("rn", flat=True), "pill"}  # every one ran
    stranded = 0
    for task in tasks:
        history = list(History.objects.filter(task=task).order_by("id").values_list("typ", "time"))
        for (typ, at), (after, then) in pairwise(history):
            if after == EventType.TIMEOUT:
                stranded += 1
                assert typ == EventType.ASSIGNMENT
                # Stranded by a crash that did not run it: made ready again within its
                # reservation and the monitor's next reset, not a lease length.
                assert then - at < lease, (task.rn, history)
        # Its leases that expired never counted: its handler had not started in them.
        assert task.unstarted == task.leases - 1, (task.rn, task.leases, history)
    assert stranded, "no normal task was leased beside the pill"


def test_a_poison_pill_beside_50_normal_tasks_pays_alone(tmp_path):
    """At a 4 s lease (a 2 s reservation), to keep it short; the defaults are the next
    test's."""
    lease = timedelta(seconds=4)
    starts = run_beside_a_pill(tmp_path, 50, lease)
    assert_only_the_pill_paid(starts, 50, lease)


@pytest.mark.slow
def test_a_poison_pill_beside_500_normal_tasks_at_the_defaults_pays_alone(tmp_path):
    starts = run_beside_a_pill(tmp_path, 500)
    assert_only_the_pill_paid(starts, 500)
