"""Locks, limits, order keys and rates under real concurrency: 8 lessee processes leasing and
finishing keyed tasks while a checker reads, on one snapshot at a time, the running tasks and the
key rows; and a killed holder's keys freed by the monitor's reset."""

from __future__ import annotations

import json
import os
import random
import signal
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Q

from scylla_django.models import History, Task, Worker, keys
from tests.helpers import expire
from tests.processes import kill_all, reports, start_together

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.django_db(transaction=True),
]

STRIPE = 3


def snapshot() -> list[tuple[int, list[str], str]]:
    """The running tasks with keys and the ready tasks of order keys, read by one statement
    (one snapshot)."""
    rows = Task.objects.filter(
        Q(status="running", keys__isnull=False) | Q(status="ready", order_key__isnull=False)
    ).values_list("pk", "keys", "status")
    return list(rows)


def violations(rows: list[tuple[int, list[str], str]]) -> list[str]:
    """What one snapshot shows that must never be: a lock held exclusively twice or beside
    readers, a limit over its size, two tasks of an order key running, or one running while
    an earlier task of its key is ready."""
    found: list[str] = []
    exclusive: Counter[str] = Counter()
    shared: Counter[str] = Counter()
    limits: Counter[str] = Counter()
    orders: Counter[str] = Counter()
    first_ready: dict[str, int] = {}
    for pk, elements, status in rows:
        for element in elements:
            if status == "ready" and element.startswith("O:"):
                first_ready[element] = min(pk, first_ready.get(element, pk))
    for pk, elements, status in rows:
        if status != "running":
            continue
        for element in elements:
            kind, name = element[:2], element[2:]
            {"L:": exclusive, "S:": shared, "C:": limits, "O:": orders}[kind][name] += 1
            if kind == "O:" and first_ready.get(element, pk) < pk:
                found.append(f"order {name}: {pk} runs before {first_ready[element]}")
    for name, n in exclusive.items():
        if n > 1 or shared[name]:
            found.append(f"lock {name}: {n} exclusive, {shared[name]} shared")
    for name, n in orders.items():
        if n > 1:
            found.append(f"order {name}: {n} running")
    for name, n in limits.items():
        if n > STRIPE:
            found.append(f"limit {name}: {n} running > {STRIPE}")
    return found


def holders(element: str) -> list[int]:
    return sorted(keys.holders(Task.objects.all(), element).values_list("pk", flat=True))


def start_children(
    tmp_path: Path, count: int, seconds: float, *extra: str, queue: str = "keys"
) -> list[Any]:
    """`count` lessees of `queue` (`tests.keys_child`), started at one moment."""
    return start_together(tmp_path, count, "tests.keys_child", queue, after=(str(seconds), *extra))


def test_eight_lessees_never_break_a_lock_or_a_limit(settings, tmp_path: Path) -> None:
    settings.SCYLLA = {"LIMITS": {"stripe": STRIPE}}
    rng = random.Random(7)
    for n in range(800):
        locks: list[Any] = [f"invoice:{rng.randrange(6)}"]
        roll = rng.random()
        if roll < 0.4:
            locks.append(("ledger", "shared"))
        elif roll < 0.45:
            locks.append("ledger")
        limits = ["stripe"] if rng.random() < 0.5 else None
        order: dict[str, Any] = {}
        if rng.random() < 0.3:
            order = {"order_key": f"customer:{rng.randrange(3)}", "order_on_failure": "continue"}
        Task.objects.submit("keys", n, locks=locks, limits=limits, **order)
    # Each leases for 3 s and goes on until it has leased 15 (killed after the test if it fails).
    children = start_children(tmp_path, 8, 3.0, "at-least=15")
    checks, bad, busiest = 0, [], Counter[str]()
    while any(child.poll() is None for child in children):
        running = snapshot()
        bad += violations(running)
        checks += 1
        for _, elements, status in running:
            if status == "running":
                busiest.update(e for e in elements if e.startswith(("C:", "S:", "O:")))
    outcomes = reports(children, timeout=60)
    leased = sum(outcome["leased"] for outcome in outcomes)
    print(f"{leased} leases, {checks} snapshots, {busiest.most_common(3)}")
    assert bad == [], bad[:10]
    assert checks > 20 and leased > 100
    assert [row for row in snapshot() if row[2] == "running"] == []


def test_a_killed_holders_keys_are_freed_by_the_monitors_reset(settings, tmp_path: Path) -> None:
    settings.SCYLLA = {"LIMITS": {"stripe": STRIPE}}
    first = Task.objects.submit("keys", 1, locks=["invoice:7"], limits=["stripe"])
    second = Task.objects.submit("keys", 2, locks=["invoice:7"], limits=["stripe"])
    [child] = start_children(tmp_path, 1, 0, "hold")
    try:
        line = child.stdout.readline()
        assert json.loads(line)["leased"] == [first.pk]
        assert holders("L:invoice:7") == [first.pk]
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        kill_all([child])
    expire(Task.objects.get(pk=first.pk))
    assert Task.objects.reset_expired() == 1
    assert holders("L:invoice:7") == holders("C:stripe") == []
    worker = Worker.objects.register(queues=["keys"], capacity=1, pid=os.getpid())
    # The keys are free again: the reset task, older than the second, takes them first.
    assert [t.pk for t in Task.objects.lease(worker, ["keys"], limit=3)] == [first.pk]
    assert Task.objects.get(pk=second.pk).status == "ready"


RATE, PERIOD = 4, timedelta(seconds=1)


def test_eight_lessees_never_start_more_than_a_rate_in_any_window(settings, tmp_path: Path) -> None:
    settings.SCYLLA = {"RATES": {"stripe": f"{RATE}/s"}}
    rated = [Task.objects.submit("rates", n, rate_key="stripe").pk for n in range(300)]
    for n in range(100):  # tasks without the rate, leased beside them
        Task.objects.submit("rates", -n)
    children = start_children(tmp_path, 8, 4.0, queue="rates")
    reports(children, timeout=60)
    # Every start, as History records it on the database clock (the lease's time).
    starts = sorted(
        History.objects.filter(task_id__in=rated, typ="TaskAssignment").values_list(
            "time", flat=True
        )
    )
    crowded = [
        (starts[i], starts[i + RATE])
        for i in range(len(starts) - RATE)
        if starts[i + RATE] - starts[i] < PERIOD
    ]
    print(f"{len(starts)} starts of the rate over {starts[-1] - starts[0]}")
    assert crowded == [], crowded[:5]
    assert len(starts) >= 3 * RATE
    # The rate held its tasks back, not the lessees: every task without it was leased.
    assert not Task.objects.filter(queue="rates", keys__isnull=True, status="ready").exists()
    assert Task.objects.filter(pk__in=rated, status="ready").exists()


def test_a_killed_holders_lock_slot_and_order_turn_go_to_the_tasks_waiting_for_them(
    settings, tmp_path: Path
) -> None:
    # The monitor's reset aborts the killed holder's task (its only lease), so each key it held
    # passes to the task that waits for that key alone.
    settings.SCYLLA = {"LIMITS": {"stripe": 1}, "MAX_LEASES": 1}
    order = {"order_key": "customer:9", "order_on_failure": "continue"}
    first = Task.objects.submit("keys", 1, locks=["invoice:7"], limits=["stripe"], **order)
    waiting = [
        Task.objects.submit("keys", 2, locks=["invoice:7"]),
        Task.objects.submit("keys", 3, limits=["stripe"]),
        Task.objects.submit("keys", 4, **order),
    ]
    [child] = start_children(tmp_path, 1, 0, "hold")
    try:
        line = child.stdout.readline()
        assert json.loads(line)["leased"] == [first.pk]
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        kill_all([child])
    worker = Worker.objects.register(queues=["keys"], capacity=5, pid=os.getpid())
    assert Task.objects.lease(worker, ["keys"], limit=5) == []
    assert [r["code"] for t in waiting for r in t.waiting_reasons()] == [
        "lock_held",
        "limit_full",
        "order_waits",
    ]
    expire(Task.objects.get(pk=first.pk))
    assert Task.objects.reset_expired() == 1
    assert Task.objects.get(pk=first.pk).status == "aborted"
    leased = Task.objects.lease(worker, ["keys"], limit=5)
    assert sorted(t.pk for t in leased) == [t.pk for t in waiting]
