"""The state machine under real concurrency: separate connections in threads and processes.

Every thread uses Django's per-thread connection (so its own database session) and closes it when
it ends. The threaded tests need PostgreSQL (row locks, SKIP LOCKED); the multi-process lease test
runs on SQLite too, where writers are serialised by `BEGIN IMMEDIATE`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now

from scylla_django.enums import EventType, Status
from scylla_django.exceptions import InvalidTransition, LeaseLost, TaskCancelled
from scylla_django.models import History, Task, Worker
from tests.helpers import expire, run_in_threads
from tests.processes import child_env, reports, start_together

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


# -- helpers ------------------------------------------------------------------------------------


def submit(queue: str, count: int) -> list[int]:
    """Submit `count` ready tasks on `queue` in bulk; return their pks."""
    outcomes = Task.objects.submit_many({"queue": queue, "spec": {"n": n}} for n in range(count))
    assert [o.outcome for o in outcomes] == ["inserted"] * count
    pks = list(Task.objects.filter(queue=queue).values_list("pk", flat=True))
    assert len(pks) == count
    return sorted(pks)


def lease_all(worker: Worker, queue: str, count: int, lease_length: float = 600) -> list[Task]:
    """Lease every ready task of `queue` with `worker` (there must be exactly `count`)."""
    tasks = Task.objects.lease(worker, [queue], limit=count, lease_length=lease_length)
    assert len(tasks) == count
    return tasks


def events(pks: Iterable[int], typ: EventType) -> Counter[int]:
    """How many History rows of type `typ` each task has."""
    return Counter(
        History.objects.filter(task_id__in=list(pks), typ=typ).values_list("task_id", flat=True)
    )


# -- 1. lease exclusivity, 8 threads ------------------------------------------------------------


@pytest.mark.postgres
def test_concurrent_leases_hand_out_each_task_exactly_once() -> None:
    """8 lessees racing over 2,000 tasks: every task is leased once, by one worker, ≤ limit each.

    Proves the single-statement PostgreSQL lease (MATERIALIZED CTE + FOR UPDATE SKIP LOCKED) never
    hands a row to two sessions, never returns more than `limit`, and writes one TaskAssignment.
    """
    limit, total, lessees = 7, 2000, 8
    pks = submit("q", total)
    workers = [Worker.objects.register(queues=["q"], capacity=limit) for _ in range(lessees)]

    def lessee(worker: Worker) -> Callable[[threading.Barrier], list[list[Task]]]:
        def job(_: threading.Barrier) -> list[list[Task]]:
            batches: list[list[Task]] = []
            empty = 0
            while empty < 3:
                leased = Task.objects.lease(worker, ["q"], limit=limit, lease_length=60)
                if leased:
                    empty = 0
                    batches.append(leased)
                else:
                    empty += 1
            return batches

        return job

    per_worker = run_in_threads([lessee(w) for w in workers])

    sizes = [len(batch) for batches in per_worker for batch in batches]
    assert max(sizes) <= limit, f"a lease returned {max(sizes)} tasks, limit {limit}"
    got: dict[int, str] = {}
    duplicates: list[int] = []
    for worker, batches in zip(workers, per_worker, strict=True):
        for task in (task for batch in batches for task in batch):
            assert task.status == Status.RUNNING and task.owner == worker.name
            if task.pk in got:
                duplicates.append(task.pk)
            got[task.pk] = worker.name
    assert duplicates == [], f"leased more than once: {duplicates[:20]}"
    assert sorted(got) == pks, "some tasks were never leased"
    print("tasks per lessee:", [sum(map(len, batches)) for batches in per_worker])

    rows = Task.objects.filter(pk__in=pks).values_list("pk", "status", "leases", "owner")
    assert {pk: (status, leases) for pk, status, leases, _ in rows} == {
        pk: (Status.RUNNING, 1) for pk in pks
    }
    assert {pk: owner for pk, _, _, owner in rows} == got
    assignments = History.objects.filter(task_id__in=pks).values_list("task_id", "typ", "worker")
    assert sorted(assignments) == sorted((pk, EventType.ASSIGNMENT, w) for pk, w in got.items())


# -- 2. cancel racing complete ------------------------------------------------------------------


@pytest.mark.postgres
def test_cancel_racing_complete_has_exactly_one_winner() -> None:
    """A client's cancel and the owner's complete, released together, never both succeed.

    Either the task is cancelled (and complete raised TaskCancelled) or completed (and cancel
    raised InvalidTransition), with exactly one terminal History row matching the final status.
    """
    rounds = 200
    worker = Worker.objects.register(queues=["race"])
    pks = [task.pk for task in lease_all(worker, "race", len(submit("race", rounds)))]

    def racer(act: Callable[[Task], None]) -> Callable[[threading.Barrier], dict[int, Any]]:
        def job(barrier: threading.Barrier) -> dict[int, Any]:
            tasks = Task.objects.in_bulk(pks)
            outcome: dict[int, Any] = {}
            for pk in pks:
                barrier.wait()
                try:
                    act(tasks[pk])
                    outcome[pk] = None
                except InvalidTransition as exc:
                    outcome[pk] = exc
            return outcome

        return job

    cancels, completes = run_in_threads(
        [
            racer(lambda task: task.cancel()),
            racer(lambda task: task.complete(worker.name, result={"pk": task.pk})),
        ]
    )

    final = dict(Task.objects.filter(pk__in=pks).values_list("pk", "status"))
    terminal_events = History.objects.filter(
        task_id__in=pks, typ__in=[EventType.CANCELLATION, EventType.COMPLETION]
    ).values_list("task_id", "typ")
    by_task: dict[int, list[str]] = {pk: [] for pk in pks}
    for pk, typ in terminal_events:
        by_task[pk].append(typ)
    tally: Counter[str] = Counter()
    for pk in pks:
        cancel_error, complete_error = cancels[pk], completes[pk]
        if final[pk] == Status.CANCELLED:
            assert cancel_error is None, f"task {pk} cancelled but cancel raised {cancel_error!r}"
            assert type(complete_error) is TaskCancelled, (pk, complete_error)
            assert by_task[pk] == [EventType.CANCELLATION], (pk, by_task[pk])
        else:
            assert final[pk] == Status.COMPLETED, (pk, final[pk])
            assert complete_error is None, f"task {pk} completed but complete raised"
            assert type(cancel_error) is InvalidTransition, (pk, cancel_error)
            assert by_task[pk] == [EventType.COMPLETION], (pk, by_task[pk])
        tally[final[pk]] += 1
    print("cancel vs complete outcomes:", dict(tally))
    # Both orders are seen (about half each over 200 rounds in practice).
    assert tally[Status.CANCELLED] and tally[Status.COMPLETED], dict(tally)

    results = dict(Task.objects.filter(pk__in=pks).values_list("pk", "result"))
    assert all(results[pk] == ({"pk": pk} if final[pk] == Status.COMPLETED else None) for pk in pks)


# -- 3. heartbeat racing the monitor ------------------------------------------------------------


@pytest.mark.postgres
def test_heartbeat_racing_reset_never_resurrects_a_lease() -> None:
    """A heartbeat on an expired lease either beats the reset or is refused with LeaseLost.

    Each round expires one of A's tasks and releases `reset_expired()` and `heartbeat(A)` together.
    Afterwards a reset task is ready with one TaskTimeout and no owner; A can neither heartbeat nor
    complete it again, even once B holds it, and B's complete succeeds.
    """
    rounds = 150
    a = Worker.objects.register(queues=["hb"])
    b = Worker.objects.register(queues=["hb"])
    pks = [task.pk for task in lease_all(a, "hb", len(submit("hb", rounds + 1)))]
    raced, control = pks[:-1], pks[-1]

    def heartbeater(barrier: threading.Barrier) -> dict[int, Exception | None]:
        tasks = Task.objects.in_bulk(raced)
        outcome: dict[int, Exception | None] = {}
        for pk in raced:
            expire(tasks[pk])  # committed before the barrier opens
            barrier.wait()
            try:
                tasks[pk].heartbeat(a, lease_length=600)
                outcome[pk] = None
            except InvalidTransition as exc:
                outcome[pk] = exc
            barrier.wait()  # the round is over: the monitor cannot see the next expiry early
        return outcome

    def monitor(barrier: threading.Barrier) -> list[int]:
        counts = []
        for _ in raced:
            barrier.wait()
            counts.append(Task.objects.reset_expired())
            barrier.wait()
        return counts

    heartbeats, resets = run_in_threads([heartbeater, monitor])

    reset_won = [pk for pk in raced if heartbeats[pk] is not None]
    beat_won = [pk for pk in raced if heartbeats[pk] is None]
    print(f"heartbeat vs reset: heartbeat won {len(beat_won)}, reset won {len(reset_won)}")
    assert all(type(heartbeats[pk]) is LeaseLost for pk in reset_won), [
        heartbeats[pk] for pk in reset_won
    ]
    assert resets == [int(heartbeats[pk] is not None) for pk in raced]

    timeouts = events(raced, EventType.TIMEOUT)
    alive = Task.objects.filter(status=Status.RUNNING, owner=a.name, deadline__gt=Now())
    assert set(alive.filter(pk__in=beat_won).values_list("pk", flat=True)) == set(beat_won)
    assert not any(timeouts[pk] for pk in beat_won)
    state = Task.objects.filter(pk__in=reset_won).values_list("pk", "status", "owner", "deadline")
    assert sorted(state) == [(pk, Status.READY, None, None) for pk in sorted(reset_won)]
    assert all(timeouts[pk] == 1 for pk in reset_won)
    timed_out = History.objects.filter(task_id__in=reset_won, typ=EventType.TIMEOUT)
    assert set(timed_out.values_list("worker", flat=True)) <= {a.name}

    # The control task is reset with no race, so what follows is exercised on ≥ 1 task.
    expire(Task.objects.get(pk=control))
    assert Task.objects.reset_expired() == 1
    reset = [*reset_won, control]
    tasks = Task.objects.in_bulk(reset)
    for pk in reset:
        with pytest.raises(LeaseLost):
            tasks[pk].heartbeat(a, lease_length=600)
    assert set(Task.objects.filter(pk__in=reset).values_list("status", flat=True)) == {"ready"}

    leased_by_b = {t.pk: t for t in Task.objects.lease(b, ["hb"], limit=len(pks))}
    assert sorted(leased_by_b) == sorted(reset)
    for pk in reset:
        with pytest.raises(LeaseLost):
            tasks[pk].complete(a, result="stale")
        with pytest.raises(LeaseLost):  # an object from an earlier lease is fenced out too
            tasks[pk].complete(b, result="stale")
        leased_by_b[pk].complete(b, result="fresh")
    rows = Task.objects.filter(pk__in=reset).values_list("status", "owner", "result", "leases")
    assert set(rows) == {(Status.COMPLETED, b.name, "fresh", 2)}
    expected = [
        (EventType.ASSIGNMENT, a.name),
        (EventType.TIMEOUT, a.name),
        (EventType.ASSIGNMENT, b.name),
        (EventType.COMPLETION, b.name),
    ]
    for pk in reset:
        assert list(History.objects.filter(task_id=pk).values_list("typ", "worker")) == expected


# -- 4. concurrent monitors ---------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("chunk_size", [None, 25])
def test_concurrent_resets_handle_each_expiry_exactly_once(chunk_size: int | None) -> None:
    """3 monitors running `reset_expired()` at once reset each of 300 expired leases exactly once.

    Their return values add up to 300, each task has one TaskTimeout and is ready again.
    """
    total = 300
    worker = Worker.objects.register(queues=["mon"])
    pks = [task.pk for task in lease_all(worker, "mon", len(submit("mon", total)))]
    Task.objects.filter(pk__in=pks).update(deadline=Now() - timedelta(seconds=5))

    counts = run_in_threads(
        [lambda _: Task.objects.reset_expired(chunk_size=chunk_size) for _ in range(3)]
    )
    print(f"reset_expired(chunk_size={chunk_size}) returned {counts}")

    assert sum(counts) == total
    assert events(pks, EventType.TIMEOUT) == Counter(pks)
    rows = Task.objects.filter(pk__in=pks).values_list("status", "owner", "deadline", "leases")
    assert set(rows) == {(Status.READY, None, None, 1)}
    assert Task.objects.reset_expired() == 0


@pytest.mark.postgres
@pytest.mark.parametrize("chunk_size", [None, 100])
def test_two_monitors_write_one_history_row_per_reset(chunk_size: int | None) -> None:
    """2 monitors resetting the same 1,000 expired leases at once, half of them yielded,
    write one History row per task between them: a TaskTimeout for each lease that ran out,
    nothing for a yielded one (its TaskYield stays its last row), and every task is ready."""
    total = 1000
    worker = Worker.objects.register(queues=["pair"], capacity=total)
    tasks = lease_all(worker, "pair", len(submit("pair", total)))
    given_back = {task.pk: task.leases for task in tasks[::2]}
    assert Task.objects.yield_many(worker, given_back) == set(given_back)
    ran_out = [task.pk for task in tasks[1::2]]
    Task.objects.filter(pk__in=ran_out).update(
        deadline=Now() - timedelta(seconds=5), updated=Now() - timedelta(seconds=6)
    )

    counts = run_in_threads(
        [lambda _: Task.objects.reset_expired(chunk_size=chunk_size) for _ in range(2)]
    )
    print(f"reset_expired(chunk_size={chunk_size}) returned {counts}")

    for pk in ran_out:
        rows = list(History.objects.filter(task_id=pk).values_list("typ", "worker"))
        assert rows == [(EventType.ASSIGNMENT, worker.name), (EventType.TIMEOUT, worker.name)]
    for pk in given_back:
        rows = list(History.objects.filter(task_id=pk).values_list("typ", "worker"))
        assert rows == [(EventType.ASSIGNMENT, worker.name), (EventType.YIELD, worker.name)]
    assert sum(counts) == total
    states = Task.objects.filter(queue="pair").values_list("status", "owner", "deadline")
    assert set(states) == {(Status.READY, None, None)}
    assert Task.objects.reset_expired() == 0


# -- 5. purge racing transitions ----------------------------------------------------------------


@pytest.mark.postgres
def test_concurrent_purge_only_deletes_old_terminal_tasks() -> None:
    """Two purgers and a client/worker finishing tasks at once: only old terminal tasks go.

    Ready and running tasks survive (also those that became terminal during the purge: their
    `updated` is fresh), deleted tasks take their History with them, and the purgers' return
    values add up to the number of tasks that disappeared.
    """
    worker = Worker.objects.register(queues=["p"])
    pks = submit("p", 700)
    leased = {task.pk: task for task in lease_all(worker, "p", 450)}
    running = sorted(leased)
    ready = sorted(set(pks) - set(leased))
    tasks = Task.objects.in_bulk(pks)
    for pk in running[:150]:
        tasks[pk].complete(worker)
    for pk in running[150:250]:
        tasks[pk].abort(worker, [{"code": "boom", "args": {}, "description": "Boom."}])
    # Aborted for good, they are dead letters, which the purge keeps: let them go.
    Task.objects.filter(pk__in=running[150:250]).dead().discard()
    for pk in [*running[250:350], *ready[:50]]:
        tasks[pk].cancel()
    old_terminal = {*running[:350], *ready[:50]}
    active = set(pks) - old_terminal
    Task.objects.update(updated=Now() - timedelta(days=30))
    history_before = History.objects.count()

    def purger(_: threading.Barrier) -> int:
        return Task.objects.purge(older_than=timedelta(days=1), chunk_size=50)

    def finisher(_: threading.Barrier) -> set[int]:
        mine = Task.objects.in_bulk(list(active))
        changed: set[int] = set()
        for still_ready, still_running in zip(ready[50:100], running[350:400], strict=True):
            mine[still_ready].cancel()
            mine[still_running].complete(worker)
            changed |= {still_ready, still_running}
        return changed

    first, second, changed = run_in_threads([purger, purger, finisher])
    print(f"purged {first} + {second}; {len(changed)} tasks finished during the purge")

    left = set(Task.objects.values_list("pk", flat=True))
    assert active <= left, f"active tasks were purged: {sorted(active - left)[:20]}"
    assert left == active, "old terminal tasks survived the purge"
    assert first + second == len(pks) - len(left)
    statuses = dict(Task.objects.filter(pk__in=changed).values_list("pk", "status"))
    assert set(statuses.values()) == {Status.CANCELLED, Status.COMPLETED}
    assert not History.objects.exclude(task_id__in=Task.objects.values("pk")).exists()
    assert History.objects.filter(task_id__in=old_terminal).count() == 0
    # The active tasks kept all their History: 1 assignment per leased task, 1 event per change.
    kept = sum(1 for pk in active if pk in leased) + len(changed)
    assert History.objects.count() == kept < history_before
    assert Task.objects.purge(older_than=timedelta(days=1)) == 0


# -- 6. lease exclusivity across processes (SQLite and PostgreSQL) ------------------------------


@pytest.mark.parametrize("reconnecting_without_transaction_mode", [False, True])
def test_lease_is_exclusive_across_processes(
    tmp_path: Path, reconnecting_without_transaction_mode: bool
) -> None:
    """Two OS processes leasing 500 tasks 5 at a time: each task goes to exactly one of them.

    Runs on SQLite too, where `BEGIN IMMEDIATE` must serialise the separate processes' leases,
    also when the database has no `transaction_mode` option and each lease opens a new
    connection inside its transaction block (the second case, SQLite only).
    """
    if reconnecting_without_transaction_mode and connection.vendor != "sqlite":
        pytest.skip("the transaction_mode option is SQLite's")
    total, processes = 500, 2
    pks = submit("proc", total)
    assert not connection.in_atomic_block  # autocommit: the children can see the tasks

    env = child_env()
    extra: tuple[str, ...] = ()
    if reconnecting_without_transaction_mode:
        env["SCYLLA_TEST_SQLITE_NO_TRANSACTION_MODE"] = "1"
        extra = ("reconnect",)
    children = start_together(
        tmp_path, processes, "tests.lease_child", "proc", after=extra, env=env
    )
    outcomes = reports(children)

    owner: dict[int, str] = {}
    duplicates: list[int] = []
    for report in outcomes:
        assert all(1 <= len(batch) <= 5 for batch in report["batches"])
        for pk in (pk for batch in report["batches"] for pk in batch):
            if pk in owner:
                duplicates.append(pk)
            owner[pk] = report["worker"]
    shares = [sum(map(len, r["batches"])) for r in outcomes]
    print(f"{connection.vendor}: tasks per process {shares}")
    assert duplicates == [], f"leased by both processes: {duplicates[:20]}"
    assert sorted(owner) == pks, "some tasks were never leased"
    if connection.vendor == "postgresql":
        # SKIP LOCKED lets both lease at once; on SQLite one process could in principle be
        # starved by the write lock, so there only exclusivity and completeness are asserted.
        assert all(shares), f"one process leased nothing: {shares}"

    rows = Task.objects.filter(pk__in=pks).values_list("pk", "status", "owner", "leases")
    assert {pk: (status, who, n) for pk, status, who, n in rows} == {
        pk: (Status.RUNNING, owner[pk], 1) for pk in pks
    }
    assert events(pks, EventType.ASSIGNMENT) == Counter(pks)
