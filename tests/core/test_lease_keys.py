"""Locks and limits taken by the lease: a task whose keys are not free is passed over, and every
transition out of running frees them (PostgreSQL and SQLite: the task table's triggers)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

import scylla_django
from scylla_django import pytest_plugin
from scylla_django.enums import Operation, event
from scylla_django.exceptions import LeaseLost
from scylla_django.models import History, Hold, Key, Limit, Outcome, Rate, Task, keys
from tests.factories import WorkerFactory
from tests.helpers import expire

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

scylla_clock = pytest_plugin.scylla_clock

LIMITS = {"SCYLLA": {"LIMITS": {"stripe": 2}}}


def lease(worker, limit: int = 10) -> list[Task]:
    return Task.objects.lease(worker, ["default"], limit=limit, lease_length=timedelta(seconds=30))


def holders(element: str) -> list[int]:
    return sorted(keys.holders(Task.objects.all(), element).values_list("pk", flat=True))


def test_an_exclusive_lock_is_held_by_one_running_task_at_a_time():
    worker = WorkerFactory()
    first = Task.objects.submit("default", 1, locks=["invoice:7"])
    second = Task.objects.submit("default", 2, locks=["invoice:7"])
    other = Task.objects.submit("default", 3, locks=["invoice:8"])
    leased = lease(worker)
    assert sorted(t.pk for t in leased) == [first.pk, other.pk]
    assert holders("L:invoice:7") == [first.pk]
    assert Task.objects.get(pk=second.pk).status == "ready"
    assert lease(worker) == []  # passed over again, never leased and handed back
    Task.objects.get(pk=first.pk).complete(worker)
    assert holders("L:invoice:7") == []
    assert [t.pk for t in lease(worker)] == [second.pk]


def test_tasks_whose_keys_are_held_do_not_fill_a_lease_ahead_of_a_free_one(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 1}}
    worker = WorkerFactory()
    holder = Task.objects.submit(
        "default", 1, locks=["invoice:7"], limits=["stripe"], order_key="k"
    )
    assert [t.pk for t in lease(worker, limit=1)] == [holder.pk]
    Task.objects.submit("default", 2, locks=["invoice:7"])
    Task.objects.submit("default", 3, limits=["stripe"])
    Task.objects.submit("default", 4, order_key="k")
    free = Task.objects.submit("default", 5, locks=["invoice:8"])
    # Three older tasks wait for the holder's keys; a lease of one passes over them.
    assert [t.pk for t in lease(worker, limit=1)] == [free.pk]


def test_shared_locks_coexist_and_exclude_a_writer():
    worker = WorkerFactory()
    readers = [Task.objects.submit("default", n, locks=[("ledger", "shared")]) for n in range(3)]
    writer = Task.objects.submit("default", 9, locks=["ledger"])
    later = Task.objects.submit("default", 10, locks=[("ledger", "shared")])
    leased = lease(worker)
    assert sorted(t.pk for t in leased) == sorted([r.pk for r in readers] + [later.pk])
    assert Task.objects.get(pk=writer.pk).status == "ready"
    for task in leased:
        task.complete(worker)
    assert [t.pk for t in lease(worker)] == [writer.pk]
    reader = Task.objects.submit("default", 11, locks=[("ledger", "shared")])
    assert lease(worker) == []
    assert Task.objects.get(pk=reader.pk).status == "ready"


def test_a_task_takes_all_its_keys_or_none():
    worker = WorkerFactory()
    holder = Task.objects.submit("default", 1, locks=["b"])
    [leased] = lease(worker, limit=1)
    assert leased.pk == holder.pk
    both = Task.objects.submit("default", 2, locks=["a", "b"])
    assert lease(worker) == []
    assert holders("L:a") == []  # "a" was free, but "b" was not: nothing taken
    assert Task.objects.get(pk=both.pk).status == "ready"
    leased.complete(worker)
    assert [t.pk for t in lease(worker)] == [both.pk]
    assert holders("L:a") == holders("L:b") == [both.pk]


@pytest.mark.parametrize("limit", [1, 10])
def test_a_limit_is_never_exceeded(settings, limit):
    settings.SCYLLA = LIMITS["SCYLLA"]
    worker = WorkerFactory()
    tasks = [Task.objects.submit("default", n, limits=["stripe"]) for n in range(5)]
    leased = lease(worker, limit=limit) + lease(worker, limit=limit) + lease(worker, limit=limit)
    assert sorted(t.pk for t in leased) == [tasks[0].pk, tasks[1].pk]
    assert Limit.objects.get(name="stripe").max_running == 2
    leased[0].abort(worker, {"code": "failed"}, retry=False)
    assert [t.pk for t in lease(worker)] == [tasks[2].pk]


# -- lease order among the candidates of one lease ------------------------------------------------

#: Keys of which a lease can start two tasks at most (none running): options, settings.
ROOM_OF_TWO = {
    "limit": ({"limits": ["stripe"]}, {"LIMITS": {"stripe": 2}}),
    "rate": ({"rate_key": "stripe"}, {"RATES": {"stripe": "2/h"}}),
    "lock": ({"locks": ["invoice:7"]}, {}),
}


@pytest.fixture
def new_pages() -> None:
    """On PostgreSQL, a task table without a page yet, for the tests of the rows' physical
    order: the rows earlier tests deleted leave free slots on the table's pages, which new row
    versions fill in any order. Truncated in the test's transaction, which the test's end
    rolls back."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {Task._meta.db_table} CASCADE")


def physical_order(tasks: list[Task]) -> list[int]:
    """The pks of `tasks` in their rows' physical order (PostgreSQL's tuple ids; SQLite's
    rowid, which is the pk)."""
    column = "ctid" if connection.vendor == "postgresql" else "rowid"
    marks = ", ".join(["%s"] * len(tasks))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {Task._meta.db_table} WHERE id IN ({marks}) ORDER BY {column}",
            [t.pk for t in tasks],
        )
        return [row[0] for row in cursor.fetchall()]


def move_to_the_end(moved: list[Task], tasks: list[Task]) -> None:
    """On PostgreSQL, rewrite the rows of `moved` (a write that changes nothing) until their
    new versions lie after the other rows of `tasks`: the lease's UPDATE then meets them last,
    whatever their lease order. A new version usually goes after the page's last tuple; one
    that reuses a freed slot is written again. (SQLite's rows keep their rowid.)"""
    if connection.vendor != "postgresql":
        return
    others = [t.pk for t in tasks if t not in moved]
    marks = ", ".join(["%s"] * len(moved))
    for _ in range(20):
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Task._meta.db_table} SET priority = priority WHERE id IN ({marks})",
                [t.pk for t in moved],
            )
        if physical_order(tasks)[: len(others)] == others:
            return
    pytest.fail(f"the rows did not move after the others: {physical_order(tasks)}")


@pytest.mark.parametrize("kind", sorted(ROOM_OF_TWO))
@pytest.mark.usefixtures("new_pages")
def test_a_lease_admits_the_earliest_tasks_whatever_the_order_of_their_rows(settings, kind):
    options, scylla = ROOM_OF_TWO[kind]
    settings.SCYLLA = scylla
    room = 1 if kind == "lock" else 2
    worker = WorkerFactory()
    tasks = [Task.objects.submit("default", n, **options) for n in range(5)]
    move_to_the_end(tasks[:room], tasks)
    assert [t.pk for t in lease(worker)] == [t.pk for t in tasks[:room]]
    assert statuses(*tasks[room:]) == ["ready"] * (5 - room)


@pytest.mark.parametrize("kind", sorted(ROOM_OF_TWO))
def test_a_lease_admits_the_tasks_of_higher_priority_first(settings, kind):
    options, scylla = ROOM_OF_TWO[kind]
    settings.SCYLLA = scylla
    room = 1 if kind == "lock" else 2
    worker = WorkerFactory()
    low = [Task.objects.submit("default", n, **options) for n in range(2)]
    high = [Task.objects.submit("default", n, priority=5, **options) for n in range(2)]
    assert physical_order(low + high) == [t.pk for t in low + high]
    assert [t.pk for t in lease(worker)] == [t.pk for t in high[:room]]
    assert statuses(*low) == ["ready", "ready"]


@pytest.mark.usefixtures("new_pages")
def test_shared_locks_ahead_of_a_writer_are_admitted_before_it():
    worker = WorkerFactory()
    readers = [Task.objects.submit("default", n, locks=[("ledger", "shared")]) for n in range(2)]
    writer = Task.objects.submit("default", 9, locks=["ledger"])
    later = Task.objects.submit("default", 10, locks=[("ledger", "shared")])
    move_to_the_end(readers, [*readers, writer, later])
    leased = lease(worker)
    assert [t.pk for t in leased] == [readers[0].pk, readers[1].pk, later.pk]
    assert statuses(writer) == ["ready"]


@pytest.mark.usefixtures("new_pages")
def test_a_writer_ahead_of_shared_locks_is_admitted_alone():
    worker = WorkerFactory()
    writer = Task.objects.submit("default", 9, locks=["ledger"])
    readers = [Task.objects.submit("default", n, locks=[("ledger", "shared")]) for n in range(2)]
    move_to_the_end([writer], [writer, *readers])
    assert [t.pk for t in lease(worker)] == [writer.pk]
    assert statuses(*readers) == ["ready", "ready"]


def test_a_limit_edited_at_runtime_applies_to_the_next_lease(settings):
    settings.SCYLLA = LIMITS["SCYLLA"]
    worker = WorkerFactory()
    for n in range(4):
        Task.objects.submit("default", n, limits=["stripe"])
    assert len(lease(worker)) == 2
    Limit.objects.filter(name="stripe").update(max_running=3)
    assert len(lease(worker)) == 1


def _complete(task: Task, worker) -> None:
    task.complete(worker)


def _abort(task: Task, worker) -> None:
    task.abort(worker, {"code": "boom"}, retry=False)


def _abort_with_retry(task: Task, worker) -> None:
    successor = task.abort(worker, {"code": "boom"}, retry=True)
    assert successor is not None and successor.keys == task.keys


def _cancel(task: Task, worker) -> None:
    task.cancel()


def _yield(task: Task, worker) -> None:
    # A yielded task stays running (and keeps its keys) until the monitor's next pass.
    task.yield_lease(worker)
    assert holders("L:invoice:7") == [task.pk]
    assert Task.objects.reset_expired() == 1


def _reset(task: Task, worker) -> None:
    expire(task)
    assert Task.objects.reset_expired() == 1


def _finish_many(task: Task, worker) -> None:
    assert Task.objects.finish_many(worker, [Outcome(pk=task.pk, lease=task.leases)]) == {task.pk}


@pytest.mark.parametrize(
    "transition", [_complete, _abort, _abort_with_retry, _cancel, _yield, _reset, _finish_many]
)
def test_every_transition_out_of_running_frees_the_keys(settings, transition):
    settings.SCYLLA = LIMITS["SCYLLA"]
    worker = WorkerFactory()
    task = Task.objects.submit(
        "default", 1, locks=["invoice:7", ("ledger", "shared")], limits=["stripe"]
    )
    assert len(lease(worker)) == 1
    assert holders("L:invoice:7") == holders("C:stripe") == [task.pk]
    assert holders("S:ledger") == [] and holders("L:ledger") == [task.pk]
    transition(Task.objects.get(pk=task.pk), worker)
    assert holders("L:invoice:7") == holders("L:ledger") == holders("C:stripe") == []
    Task.objects.submit("default", 2, locks=["invoice:7", "ledger"], limits=["stripe"])
    # The keys are free: one task naming them all is leased (a reset task or a retry, being
    # older, before the new one).
    assert len(lease(worker)) == 1
    assert Key.objects.filter(name__in=["L:invoice:7", "L:ledger", "C:stripe"]).count() == 3


def test_a_refused_transition_frees_nothing():
    worker, other = WorkerFactory(), WorkerFactory()
    task = Task.objects.submit("default", 1, locks=["invoice:7"])
    assert len(lease(worker)) == 1
    with pytest.raises(LeaseLost):  # the lease is not the other worker's
        Task.objects.get(pk=task.pk).complete(other)
    assert holders("L:invoice:7") == [task.pk]


def test_a_heartbeat_keeps_the_keys():
    worker = WorkerFactory()
    task = Task.objects.submit("default", 1, locks=["invoice:7"])
    [leased] = lease(worker)
    leased.heartbeat(worker)
    assert holders("L:invoice:7") == [task.pk]


@pytest.mark.parametrize(
    ("options", "field", "code"),
    [
        ({"locks": "invoice:7"}, "locks", "invalid_key"),
        ({"locks": [""]}, "locks", "invalid_key"),
        ({"locks": ["x" * 201]}, "locks", "invalid_key"),
        ({"locks": [7]}, "locks", "invalid_key"),
        ({"locks": [("a", "sometimes")]}, "locks", "invalid_key"),
        ({"locks": ["a", ("a", "shared")]}, "locks", "invalid_key"),
        ({"limits": ["nowhere"]}, "limits", "unknown_limit"),
        ({"limits": [None]}, "limits", "invalid_key"),
    ],
)
def test_bad_keys_are_refused_and_nothing_is_written(options, field, code):
    with pytest.raises(ValidationError) as raised:
        Task.objects.submit("default", 1, **options)
    assert [e.code for e in raised.value.error_dict[field]] == [code]
    assert not Task.objects.exists()
    assert not Limit.objects.exists()


def test_a_task_without_keys_has_none():
    task = Task.objects.submit("default", 1)
    assert Task.objects.get(pk=task.pk).keys is None


# -- order keys ---------------------------------------------------------------------------------


def statuses(*tasks: Task) -> list[str]:
    return [Task.objects.get(pk=t.pk).status for t in tasks]


def test_an_order_key_runs_its_tasks_one_at_a_time_in_submit_order():
    worker = WorkerFactory()
    first = Task.objects.submit("default", 1, order_key="customer:9")
    second = Task.objects.submit("default", 2, order_key="customer:9", priority=200)
    other = Task.objects.submit("default", 3, order_key="customer:10")
    # The second has the higher priority, but waits for the first: its key's earlier task.
    assert sorted(t.pk for t in lease(worker)) == [first.pk, other.pk]
    assert lease(worker) == []
    Task.objects.get(pk=first.pk).complete(worker)
    assert [t.pk for t in lease(worker)] == [second.pk]


def test_a_cancelled_task_lets_its_order_key_move_on():
    worker = WorkerFactory()
    first = Task.objects.submit("default", 1, order_key="k")
    second = Task.objects.submit("default", 2, order_key="k")
    first.cancel()
    assert [t.pk for t in lease(worker)] == [second.pk]


def test_an_abort_for_good_blocks_the_key_until_the_task_is_retried():
    worker = WorkerFactory()
    first = Task.objects.submit("default", 1, order_key="k")
    second = Task.objects.submit("default", 2, order_key="k")
    [leased] = lease(worker)
    leased.abort(worker, {"code": "boom"}, retry=False)
    assert lease(worker) == []
    assert statuses(second) == ["ready"]
    retry = Task.objects.get(pk=first.pk).retry()
    # The retry keeps its predecessor's place: it goes before the second.
    assert [t.pk for t in lease(worker)] == [retry.pk]
    Task.objects.get(pk=retry.pk).complete(worker)
    assert [t.pk for t in lease(worker)] == [second.pk]


def test_an_automatic_retry_keeps_the_place():
    worker = WorkerFactory()
    Task.objects.submit("default", 1, order_key="k")
    second = Task.objects.submit("default", 2, order_key="k")
    [leased] = lease(worker)
    retry = leased.abort(worker, {"code": "boom"}, retry=True)
    assert retry is not None
    assert lease(worker) == []  # the retry waits out its backoff, and the second waits for it
    assert statuses(second) == ["ready"]
    Task.objects.filter(pk=retry.pk).update(not_before=None)
    assert [t.pk for t in lease(worker)] == [retry.pk]


def test_continue_moves_on_after_an_abort_for_good():
    worker = WorkerFactory()
    Task.objects.submit("default", 1, order_key="k", order_on_failure="continue")
    second = Task.objects.submit("default", 2, order_key="k")
    [leased] = lease(worker)
    leased.abort(worker, {"code": "boom"}, retry=False)
    assert [t.pk for t in lease(worker)] == [second.pk]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"order_key": ""}, "order_key"),
        ({"order_key": 9}, "order_key"),
        ({"order_key": "k", "order_on_failure": "retry"}, "order_on_failure"),
        ({"order_on_failure": "block"}, "order_on_failure"),
    ],
)
def test_bad_order_options_are_refused(options, field):
    with pytest.raises(ValidationError) as raised:
        Task.objects.submit("default", 1, **options)
    assert [e.code for e in raised.value.error_dict[field]] == ["invalid_key"]
    assert not Task.objects.exists()
    assert not Key.objects.exists()


# -- rates --------------------------------------------------------------------------------------


def test_a_rate_starts_at_most_count_tasks_per_period(settings, scylla_clock):
    settings.SCYLLA = {"RATES": {"stripe": "2/h"}}
    worker = WorkerFactory()
    tasks = [Task.objects.submit("default", n, rate_key="stripe") for n in range(5)]
    leased = lease(worker)
    assert [t.pk for t in leased] == [tasks[0].pk, tasks[1].pk]
    for task in leased:
        task.complete(worker)
    assert lease(worker) == []  # finished, but their starts are still within the hour
    scylla_clock.advance(timedelta(minutes=59))
    assert lease(worker) == []
    scylla_clock.advance(timedelta(minutes=1, seconds=1))
    # A new window: two more start, in one lease, and the fifth waits.
    assert [t.pk for t in lease(worker)] == [tasks[2].pk, tasks[3].pk]
    assert Task.objects.get(pk=tasks[4].pk).status == "ready"


def test_a_rate_start_is_the_lease_time_history_records(settings):
    """A start is stamped at the task's lease time (its `updated`, its History row's time),
    however long after reading the clock the lease's UPDATE runs: the windows a rate bounds
    are those of the recorded starts."""
    settings.SCYLLA = {"RATES": {"stripe": "2/h"}}
    worker = WorkerFactory()
    task = Task.objects.submit("default", 1, rate_key="stripe")

    def slow_update(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("UPDATE") and Task._meta.db_table in sql:
            time.sleep(0.05)  # a busy database: the UPDATE runs well after the clock's reading
        return execute(sql, params, many, context)

    with connection.execute_wrapper(slow_update):
        [leased] = lease(worker)
    leased_at = History.objects.get(task=task, typ=event(Operation.LEASE)).time
    assert leased.updated == leased_at
    [start] = Key.objects.get(name="R:stripe").starts
    assert start == pytest.approx(leased_at.timestamp(), abs=0.001)


@pytest.mark.parametrize(
    ("rates", "rate_key", "code"),
    [
        ({}, "stripe", "unknown_rate"),
        ({"stripe": "100/fortnight"}, "stripe", "invalid_rate"),
        ({"stripe": "0/m"}, "stripe", "invalid_rate"),
        ({"stripe": "many/m"}, "stripe", "invalid_rate"),
        ({"stripe": "1/m"}, "", "invalid_key"),
    ],
)
def test_bad_rates_are_refused_and_nothing_is_written(settings, rates, rate_key, code):
    settings.SCYLLA = {"RATES": rates}
    with pytest.raises(ValidationError) as raised:
        Task.objects.submit("default", 1, rate_key=rate_key)
    assert [e.code for e in raised.value.error_dict["rate_key"]] == [code]
    assert not Task.objects.exists() and not Rate.objects.exists() and not Key.objects.exists()


def test_parse_rate():
    assert keys.parse_rate("100/m") == (100, 60.0)
    assert keys.parse_rate("5/10s") == (5, 10.0)
    assert keys.parse_rate("1/d") == (1, 86400.0)


# -- locks outside tasks ------------------------------------------------------------------------


def test_a_lock_outside_tasks_keeps_tasks_of_the_lock_waiting():
    worker = WorkerFactory()
    task = Task.objects.submit("default", 1, locks=["invoice:7"])
    with scylla_django.lock("invoice:7", ttl=60) as token:
        assert token > 0
        assert lease(worker) == []
        assert keys.acquire_lock("invoice:7", shared=True) is None
    assert [t.pk for t in lease(worker)] == [task.pk]
    # Now the task holds it: code outside tasks waits, then gives up.
    with pytest.raises(keys.LockNotFree), scylla_django.lock("invoice:7", wait=0.05):
        pass


def test_shared_holds_coexist_and_keep_writers_out():
    worker = WorkerFactory()
    reader = Task.objects.submit("default", 1, locks=[("ledger", "shared")])
    first = keys.acquire_lock("ledger", shared=True)
    second = keys.acquire_lock("ledger", shared=True)
    assert first and second and keys.acquire_lock("ledger") is None
    assert [t.pk for t in lease(worker)] == [reader.pk]
    writer = Task.objects.submit("default", 2, locks=["ledger"])
    assert keys.release_lock(first) and keys.release_lock(second)
    assert not keys.release_lock(second)
    Task.objects.get(pk=reader.pk).complete(worker)
    assert [t.pk for t in lease(worker)] == [writer.pk]


def test_a_hold_ends_by_itself_after_its_ttl(scylla_clock):
    worker = WorkerFactory()
    task = Task.objects.submit("default", 1, locks=["invoice:7"])
    assert keys.acquire_lock("invoice:7", ttl=60)
    assert lease(worker) == []
    scylla_clock.advance(timedelta(seconds=59))
    assert lease(worker) == []
    scylla_clock.advance(timedelta(seconds=2))
    assert [t.pk for t in lease(worker)] == [task.pk]


def test_a_manual_hold_lasts_until_force_released():
    worker = WorkerFactory()
    task = Task.objects.submit("default", 1, locks=["invoice:7"])
    assert keys.acquire_lock("invoice:7", ttl=None)
    assert lease(worker) == []
    assert keys.force_release_lock("invoice:7") == 1
    assert [t.pk for t in lease(worker)] == [task.pk]


@pytest.mark.parametrize(("name", "ttl"), [("", 60), ("x" * 201, 60), ("a", 0), ("a", "soon")])
def test_bad_holds_are_refused(name, ttl):
    with pytest.raises(ValidationError):
        keys.acquire_lock(name, ttl=ttl)
    assert not Hold.objects.exists()


# -- why a task waits ---------------------------------------------------------------------------


def codes(task: Task) -> list[tuple[str, str | None]]:
    return [(r["code"], r.get("key")) for r in Task.objects.get(pk=task.pk).waiting_reasons()]


def test_waiting_reasons_name_each_key_that_is_not_free(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 1}, "RATES": {"burst": "1/h"}}
    worker = WorkerFactory()
    holder = Task.objects.submit(
        "default", 1, rn="holder", locks=["invoice:7"], limits=["stripe"], rate_key="burst"
    )
    first = Task.objects.submit("default", 2, rn="first", order_key="c")
    assert len(lease(worker)) == 2
    waiting = Task.objects.submit(
        "default",
        3,
        locks=["invoice:7"],
        limits=["stripe"],
        order_key="c",
        rate_key="burst",
    )
    assert lease(worker) == []
    reasons = Task.objects.get(pk=waiting.pk).waiting_reasons()
    assert [(r["code"], r["key"]) for r in reasons] == [
        ("limit_full", "stripe"),
        ("lock_held", "invoice:7"),
        ("order_waits", "c"),
        ("rate_exhausted", "burst"),
    ]
    assert reasons[1]["holders"] == ["holder"] and reasons[2]["for"] == "first"
    assert (reasons[0]["running"], reasons[0]["max_running"]) == (1, 1)
    assert reasons[3]["until"] > time.time() + 3000
    assert codes(holder) == [] and codes(first) == []  # running: not waiting


def test_a_task_free_to_run_has_no_reason_and_a_delayed_one_says_so():
    WorkerFactory()  # a live worker serves the queue "default"
    task = Task.objects.submit("default", 1, locks=["a"])
    assert codes(task) == []
    later = Task.objects.submit(
        "default", 2, not_before=timezone.now() + timedelta(hours=1), locks=["b"]
    )
    assert codes(later) == [("not_before", None)]
