"""Bundled execution with real worker processes: a bundle handler's tasks are leased up to
`bundle_size` at a time and run by one call; each member gets its own outcome, heartbeat and
cancellation."""

from __future__ import annotations

import signal

import pytest

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from tests.processes import finish, output_so_far, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

FAST = ["--poll-interval", "0.1", "-v", "2", "--handlers=tests.worker_handlers"]


def worker(*queues: str, lease: str = "5s"):
    return start(
        "scylla_worker", *(f"--queue={q}" for q in queues), f"--lease-length={lease}", *FAST
    )


def stop(process) -> str:
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output
    return output


def test_tasks_are_leased_in_bundles_and_each_gets_its_own_outcome():
    tasks = [Task.objects.submit("t-bundle", {"n": n}, rn=f"b{n}") for n in range(9)]
    tasks.append(Task.objects.submit("t-bundle", {"fail": True}, rn="b-fail"))
    tasks.append(Task.objects.submit("t-bundle", {"done": True}, rn="b-done"))
    tasks.append(Task.objects.submit("t-echo", {"plain": 1}, rn="plain"))
    process = worker("t-bundle", "t-echo")
    try:
        wait_until(
            lambda: not Task.objects.filter(status__in=[Status.READY, Status.RUNNING]).exists(),
            timeout=30,
            what="every task finished",
        )
    finally:
        output = stop(process)
    done = {t.rn: t for t in Task.objects.all()}
    assert done["plain"].status == Status.COMPLETED  # a plain queue beside: its own slots
    assert done["plain"].result == {"echo": {"plain": 1}}
    failed = done["b-fail"]
    assert failed.status == Status.ABORTED and failed.errors[0]["code"] == "bad"
    assert done["b-done"].result["done"] is True
    results = [t.result for rn, t in done.items() if rn.startswith("b") and rn != "b-fail"]
    assert all(
        t.status == Status.COMPLETED
        for rn, t in done.items()
        if rn.startswith("b") and rn != "b-fail"
    )
    # Eleven tasks in bundles of at most five: three calls, each member told its bundle's size.
    calls: dict[str, int] = {}
    for result in results:
        calls[result["call"]] = result["size"]
    assert sorted(calls.values()) == [1, 5, 5], calls
    assert "Traceback" not in output


def test_a_bundle_waits_up_to_bundle_wait_to_fill():
    """`t-bundle-fill` bundles 3 and waits up to ten minutes for them: the bundle runs once
    full, not before and not ten minutes later."""
    first = Task.objects.submit("t-bundle-fill", {"n": 0}, rn="f0")
    process = worker("t-bundle-fill")
    try:
        wait_until(
            lambda: "1 of a bundle of 3 ready" in output_so_far(process),
            what="the worker waiting for more",
        )
        more = [Task.objects.submit("t-bundle-fill", {"n": n}, rn=f"f{n}") for n in (1, 2)]
        wait_until(
            lambda: Task.objects.filter(status=Status.COMPLETED).count() == 3, what="the bundle"
        )
    finally:
        stop(process)
    results = [Task.objects.get(pk=t.pk).result for t in (first, *more)]
    assert {r["call"] for r in results} == {results[0]["call"]}  # one call, one bundle of 3
    assert results[0]["size"] == 3
    # One lease statement: the three assignments carry the same database time.
    times = set(History.objects.filter(typ=EventType.ASSIGNMENT).values_list("time", flat=True))
    assert len(times) == 1


def test_a_raising_bundle_aborts_the_members_not_decided():
    tasks = [Task.objects.submit("t-bundle-raise", {"n": n}, rn=f"r{n}") for n in range(3)]
    process = worker("t-bundle-raise")
    try:
        wait_until(
            lambda: not Task.objects.filter(status__in=[Status.READY, Status.RUNNING]).exists(),
            timeout=30,
            what="the bundle",
        )
    finally:
        stop(process)
    by_rn = {t.rn: t for t in Task.objects.filter(pk__in=[t.pk for t in tasks])}
    decided = [t for t in by_rn.values() if t.status == Status.COMPLETED]
    assert len(decided) == 1 and decided[0].result == "first"
    aborted = [t for t in by_rn.values() if t.status == Status.ABORTED]
    assert len(aborted) == 2
    assert {e["args"]["type"] for t in aborted for e in t.errors} == {"builtins.RuntimeError"}


def test_each_member_has_its_own_heartbeat_and_cancellation():
    tasks = [Task.objects.submit("t-bundle-slow", {"seconds": 4}, rn=f"s{n}") for n in range(3)]
    process = worker("t-bundle-slow", lease="2s")
    try:
        wait_until(
            lambda: Task.objects.filter(status=Status.RUNNING).count() == 3,
            timeout=30,
            what="the bundle running",
        )
        leased = dict(Task.objects.values_list("rn", "deadline"))
        wait_until(
            lambda: all(
                deadline > leased[rn] for rn, deadline in Task.objects.values_list("rn", "deadline")
            ),
            what="a heartbeat of each member",
        )
        Task.objects.get(rn="s1").cancel()
        wait_until(
            lambda: not Task.objects.filter(status=Status.RUNNING).exists(),
            timeout=30,
            what="the bundle finished",
        )
        # The lease (2 s) was extended for each member while the bundle ran 4 s: no reset.
        assert Task.objects.reset_expired() == 0
    finally:
        stop(process)
    by_rn = {t.rn: t for t in Task.objects.filter(pk__in=[t.pk for t in tasks])}
    assert by_rn["s1"].status == Status.CANCELLED
    for rn in ("s0", "s2"):
        assert by_rn[rn].status == Status.COMPLETED and by_rn[rn].result == "worked"
        assert by_rn[rn].leases == 1
    assert not History.objects.filter(typ=EventType.TIMEOUT).exists()


def test_an_async_bundle_handler():
    tasks = [Task.objects.submit("t-bundle-async", {"n": n}) for n in range(6)]
    process = worker("t-bundle-async")
    try:
        wait_until(
            lambda: Task.objects.filter(status=Status.COMPLETED).count() == 6,
            timeout=30,
            what="the bundles",
        )
    finally:
        stop(process)
    results = [Task.objects.get(pk=t.pk).result for t in tasks]
    assert [r["spec"] for r in results] == [{"n": n} for n in range(6)]
    assert max(r["size"] for r in results) <= 4


def test_a_shutdown_yields_a_running_bundle_and_aborts_none_of_it():
    tasks = [Task.objects.submit("t-bundle-slow", {"seconds": 30}, rn=f"y{n}") for n in range(3)]
    process = worker("t-bundle-slow")
    try:
        wait_until(
            lambda: Task.objects.filter(status=Status.RUNNING).count() == 3,
            timeout=30,
            what="the bundle running",
        )
    finally:
        output = stop(process)  # the stop reaches each member's check(): it is let through
    assert Task.objects.reset_expired() == 3  # yielded: ready at once
    assert set(
        Task.objects.filter(pk__in=[t.pk for t in tasks]).values_list("status", flat=True)
    ) == {Status.READY}
    assert History.objects.filter(typ=EventType.YIELD).count() == 3
    assert "yielded" in output
