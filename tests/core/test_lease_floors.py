"""Lease floors (PostgreSQL, `db.floors`): a lease walks the ready index from its queue's floor,
and no ready task is ever below it: a task made ready before the floor (a higher priority, a
reset lease, a retry) lowers it and is leased in its turn, and a raise never passes a task that
a transaction still in progress made ready."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from scylla_django import db
from scylla_django.db import floors
from scylla_django.models import TABLES, Task, Worker
from tests.helpers import expire, prepared_plan, task_scans

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def queue() -> str:
    """A queue of the test's own: floors are rows of their own table, which no flush empties."""
    return f"floors-{uuid.uuid4().hex[:12]}"


def floor_of(queue: str) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT priority, turn, created, id FROM {floors.FLOOR_TABLE} WHERE queue = %s",
            [queue],
        )
        return cursor.fetchone()


def submit(queue: str, count: int, **fields: Any) -> list[Task]:
    return [Task.objects.submit(queue, {"n": n}, **fields) for n in range(count)]


def test_a_raise_moves_the_floor_to_the_first_ready_task(queue):
    tasks = submit(queue, 6)
    worker = Worker.objects.register(queues=[queue])
    assert floor_of(queue) is None  # no floor yet: the lease walks the whole index
    leased = Task.objects.lease(worker, [queue], limit=4)
    assert [t.pk for t in leased] == [t.pk for t in tasks[:4]]

    assert floors.raise_floors("default", [queue]) == [queue]

    assert floor_of(queue)[3] == tasks[4].pk
    assert [t.pk for t in Task.objects.lease(worker, [queue], limit=5)] == [t.pk for t in tasks[4:]]


def test_a_queue_with_nothing_ready_has_a_floor_below_every_task(queue):
    worker = Worker.objects.register(queues=[queue])
    floors.raise_floors("default", [queue])
    assert floor_of(queue) == (-1, None, None, None)
    assert Task.objects.lease(worker, [queue]) == []

    [task] = submit(queue, 1)

    assert floor_of(queue)[3] == task.pk  # the new task lowered it
    assert [t.pk for t in Task.objects.lease(worker, [queue])] == [task.pk]


def test_a_task_sorting_before_the_floor_is_still_leased_in_order(queue):
    """A higher priority submitted after the raise, and a lease reset to ready (its old
    `created` sorts before every task still waiting), are leased first, in lease order."""
    tasks = submit(queue, 6)
    worker = Worker.objects.register(queues=[queue])
    [first, *_] = Task.objects.lease(worker, [queue], limit=3, lease_length=30)
    floors.raise_floors("default", [queue])
    assert floor_of(queue)[3] == tasks[3].pk

    expire(first)
    assert Task.objects.reset_expired() == 1  # ready again, before the floor
    urgent = Task.objects.submit(queue, {"urgent": True}, priority=5)

    assert floor_of(queue)[0] == 5
    leased = Task.objects.lease(worker, [queue], limit=10)
    assert [t.pk for t in leased] == [urgent.pk, first.pk, *(t.pk for t in tasks[3:])]


def test_a_task_not_yet_due_holds_the_floor_until_it_is_leased(queue):
    [later] = submit(queue, 1, not_before=timezone.now() + timedelta(hours=1))
    after = submit(queue, 2)
    worker = Worker.objects.register(queues=[queue])
    floors.raise_floors("default", [queue])
    assert floor_of(queue)[3] == later.pk  # a ready task, though not due

    assert [t.pk for t in Task.objects.lease(worker, [queue], limit=5)] == [t.pk for t in after]
    Task.objects.filter(pk=later.pk).update(not_before=None)
    assert [t.pk for t in Task.objects.lease(worker, [queue])] == [later.pk]


def test_a_raise_never_passes_a_task_made_ready_by_a_transaction_in_progress(queue):
    """A transaction resets a lease to ready (it sorts before every task waiting) and stays
    open; the queue has no floor yet, so its trigger lowers none. A raise then leaves the
    queue alone (the writer holds its lock): once the writer commits, the task is leased
    first. Had the raise put the floor at the first task it could see, the reset task would
    be below it, and never leased."""
    tasks = submit(queue, 5)
    worker = Worker.objects.register(queues=[queue])
    [first, *_] = Task.objects.lease(worker, [queue], limit=3, lease_length=30)
    expire(first)
    written, release = threading.Event(), threading.Event()

    def writer() -> None:
        try:
            with transaction.atomic():
                assert Task.objects.reset_expired() == 1
                written.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert written.wait(30)
        assert floors.raise_floors("default", [queue]) == []  # locked out: left as it was
        assert floor_of(queue) is None
    finally:
        release.set()
        thread.join(30)

    assert [t.pk for t in Task.objects.lease(worker, [queue], limit=3)] == [
        first.pk,
        tasks[3].pk,
        tasks[4].pk,
    ]


def test_a_raise_inside_a_transaction_is_left_for_later(queue):
    submit(queue, 1)
    with transaction.atomic():
        floors.raise_floors_now_and_then("default", [queue])
    assert floor_of(queue) is None


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_walk_starts_at_the_floor_in_the_ready_index(queue, mode):
    """The floor is where the index scan starts (an index condition), not a filter applied to
    each entry read: the entries before it are never read."""
    submit(queue, 3)
    worker = Worker.objects.register(queues=[queue])
    floors.raise_floors("default", [queue])
    statement, params = db.lease_statement(TABLES, "default", locked=False)
    params.update(
        worker_id=worker.pk,
        worker=worker.name,
        queues=[queue],
        limit=2,
        lease_length=timedelta(seconds=30),
        timeouts=[None],
        timeout_grace=timedelta(seconds=10),
        locked=False,
    )

    plan = prepared_plan(statement, params, mode)

    conditions = [
        scan.get("Index Cond", "")
        for scan in task_scans(plan["Plan"], Task._meta.db_table)
        if scan.get("Index Name") == "scylla_task_ready_idx"
    ]
    assert any("priority = " in c and "ROW(turn, created, id) >= ROW(" in c for c in conditions)
    assert any("priority < " in c for c in conditions)  # then the lower priorities
