"""Fair shares, key families and shared rates under real concurrency: 4 lessee processes
(`tests.keys_child`, leasing 3 at a time) on PostgreSQL. The full sizes of issue 43 (20,000 +
10 tasks, 8 lessees, 1,000 tenants) run in `benchmarks/fairness.py`."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from contextlib import suppress
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import Min

from scylla_django import rates
from scylla_django.exceptions import RateExceeded
from scylla_django.models import History, Limit, QueueSetting, Task
from tests.helpers import run_in_threads
from tests.processes import start_lessees

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.django_db(transaction=True),
]

LESSEES = 4
#: Tasks a lessee may hold from a snapshot taken before a submission (`keys_child.LIMIT`).
LEASE_SIZE = 3


def finish_children(children: list) -> None:
    try:
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                child.wait()
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err


def test_a_late_tenant_starts_within_a_bound_of_an_early_tenants_backlog(tmp_path: Path) -> None:
    QueueSetting.objects.share("fair", "tenant")
    Task.objects.submit_many({"queue": "fair", "spec": n, "fair_key": "big"} for n in range(2000))
    children = start_lessees(tmp_path, LESSEES, 5.0, queue="fair")
    try:
        deadline = time.monotonic() + 60
        while Task.objects.filter(queue="fair").exclude(status="ready").count() < 100:
            assert time.monotonic() < deadline, "the lessees lease nothing"
            time.sleep(0.05)
        mark = History.objects.order_by("-id").values_list("id", flat=True).first()
        # One statement: the late tenant's 10 tasks arrive together, so no lease between two of
        # its submissions takes the big tenant's tasks while none of the small one's is ready.
        rns = [
            outcome.rn
            for outcome in Task.objects.submit_many(
                {"queue": "fair", "spec": n, "fair_key": "small"} for n in range(10)
            )
        ]
        small = list(Task.objects.filter(rn__in=rns).values_list("pk", flat=True))
        while Task.objects.filter(pk__in=small, status="ready").exists():
            assert time.monotonic() < deadline, "the late tenant's tasks never started"
            time.sleep(0.05)
        # Counted once the late tenant's tasks have all started: the lessees go on leasing
        # until their time is up, and a fast machine drains the rest of the backlog by then.
        big_waiting = Task.objects.filter(queue="fair", fair_key="big", status="ready").count()
    finally:
        finish_children(children)
    # The starts that count are those of leases that began once the late tenant's tasks were
    # submitted (a lease under way then, which saw none of them, is the bound's LESSEES *
    # LEASE_SIZE): a busy machine lets the lessees lease several times between the mark and
    # the submission.
    submitted = Task.objects.filter(pk__in=small).aggregate(at=Min("created"))["at"]
    starts = list(
        History.objects.filter(id__gt=mark, typ="TaskAssignment", time__gte=submitted)
        .order_by("id")
        .values_list("task_id", flat=True)
    )
    last = max(starts.index(pk) for pk in small)
    big_before = last + 1 - len(small)
    # Its 10 tasks take turns 0..9 from the service's place: the big tenant has at most 10
    # turns up to then, and the lessees held at most LESSEES * LEASE_SIZE from an earlier snapshot.
    bound = len(small) + LESSEES * LEASE_SIZE
    print(f"the late tenant's 10 tasks started among the big one's next {big_before}")
    assert big_before <= bound
    # Without fairness, its first task would have waited for the big tenant's whole backlog.
    assert big_waiting > 100


def test_weights_three_to_one_over_a_window(tmp_path: Path) -> None:
    QueueSetting.objects.share("fair", "tenant", weights={"gold": 3})
    Task.objects.submit_many(
        {"queue": "fair", "spec": n, "fair_key": key}
        for key in ("gold", "lead")
        for n in range(600)
    )
    # Long enough for 200 starts on a busy machine (both keys stay backlogged with 600 each).
    children = start_lessees(tmp_path, LESSEES, 8.0, queue="fair")
    finish_children(children)
    starts = list(
        History.objects.filter(typ="TaskAssignment", task__queue="fair")
        .order_by("id")
        .values_list("task__fair_key", flat=True)[:400]
    )
    counts = Counter(starts)
    print(f"over the first {len(starts)} starts: {dict(counts)}")
    assert len(starts) >= 200  # both keys stayed backlogged over the window
    assert counts["gold"] / counts["lead"] == pytest.approx(3, rel=0.10)


def test_a_hundred_tenants_of_a_family_never_exceed_its_default(settings, tmp_path: Path) -> None:
    settings.SCYLLA = {"LIMITS": {"tenant": {"default": 2}}}
    Task.objects.submit_many(
        {"queue": "fair", "spec": n, "limits": [("tenant", t)]}
        for t in range(100)
        for n in range(6)
    )
    assert Limit.objects.filter(name__startswith="tenant:").count() == 100
    children = start_lessees(tmp_path, LESSEES, 3.0, queue="fair")
    try:
        checks, worst = 0, Counter[str]()
        while any(child.poll() is None for child in children):
            running = Counter(
                element
                for elements in Task.objects.filter(status="running", queue="fair").values_list(
                    "keys", flat=True
                )
                for element in elements
            )
            worst |= running
            checks += 1
    finally:
        finish_children(children)
    print(f"{checks} snapshots; most running of one tenant: {worst.most_common(1)}")
    assert checks > 20
    assert max(worst.values()) == 2


RATE, PERIOD = 6, timedelta(seconds=1)


def test_tasks_and_consume_callers_share_one_window(settings, tmp_path: Path) -> None:
    settings.SCYLLA = {"RATES": {"stripe": f"{RATE}/s"}}
    rated = [Task.objects.submit("rates", n, rate_key="stripe").pk for n in range(200)]
    children = start_lessees(tmp_path, LESSEES, 3.0, queue="rates")

    def caller(_barrier) -> list[tuple[object, int]]:
        spent = []
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            with suppress(RateExceeded):  # no room within the wait: try again
                spent.append((rates.consume("stripe", 2, wait=0.2), 2))
        return spent

    try:
        consumed = [s for spent in run_in_threads([caller, caller]) for s in spent]
    finally:
        finish_children(children)
    units = [
        (time, 1)
        for time in History.objects.filter(task_id__in=rated, typ="TaskAssignment").values_list(
            "time", flat=True
        )
    ]
    units += consumed
    units.sort(key=lambda unit: unit[0])
    crowded = []
    for i, (start, _) in enumerate(units):
        within = sum(n for at, n in units[i:] if at - start < PERIOD)
        if within > RATE:
            crowded.append((start, within))
    print(f"{len(units) - len(consumed)} task starts and {len(consumed)} consumes")
    assert crowded == [], crowded[:5]
    assert consumed and len(units) > len(consumed)
