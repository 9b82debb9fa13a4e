"""The worker's batched finish finds its rows by key: not by its owner, whose finished tasks
keep its name, nor by a walk of a table the planner knows nothing of. With the next lease, it
returns what it finished once."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from scylla_django import db
from scylla_django.models import TABLES, Outcome, Task, Worker
from tests.helpers import prepared_plan, task_scans

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_a_finish_reads_only_its_own_rows_however_many_tasks_its_worker_finished(mode):
    """A worker's finished tasks keep its name as their owner. Found by owner (or, in a table
    without statistics, by a walk of the whole table), each finish read every task the worker
    had ever finished: 3,000 rows here, on every call."""
    table = Task._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table} RESTART IDENTITY CASCADE")  # forgets reltuples too
    worker = Worker.objects.register(queues=["work"])
    Task.objects.submit_many({"queue": "done", "spec": {"n": n}} for n in range(3000))
    Task.objects.filter(queue="done").update(status="completed", progress=1.0, owner=worker.name)
    Task.objects.submit("work", {})
    [task] = Task.objects.lease(worker, ["work"])

    statement, params = db.finish_statement(TABLES, "default")
    row = {"id": task.pk, "lease": task.leases, "status": "completed", "result": 1}
    rows = [{**row, "errors": None}]
    params.update(rows=json.dumps(rows), worker=worker.name)
    plan = prepared_plan(statement, params, mode, analyze=True)

    scans = task_scans(plan["Plan"], table)
    read = sum(
        s["Actual Rows"] * s["Actual Loops"] + s.get("Rows Removed by Filter", 0) for s in scans
    )
    assert scans and read <= 10, plan
    assert Task.objects.get(pk=task.pk).status == "completed"


def test_the_worker_s_finish_still_fences_each_row():
    """Found by key, each row is still fenced on its lease: a stale lease is refused."""
    worker = Worker.objects.register(queues=["work"])
    first, second = (Task.objects.submit("work", {"n": n}) for n in range(2))
    leased = {t.pk: t for t in Task.objects.lease(worker, ["work"], limit=2)}
    done = Task.objects.finish_many(
        worker,
        [
            Outcome(first.pk, leased[first.pk].leases, result=1),
            Outcome(second.pk, leased[second.pk].leases + 1, result=2),
        ],
    )
    assert done == {first.pk}
    assert Task.objects.get(pk=second.pk).status == "running"


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_a_heartbeat_reads_only_its_own_rows_however_many_tasks_its_worker_finished(mode):
    """The heartbeat of a worker that has finished 3,000 tasks reads its leased rows only."""
    from datetime import timedelta

    table = Task._meta.db_table
    worker = Worker.objects.register(queues=["work"])
    Task.objects.submit_many({"queue": "done", "spec": {"n": n}} for n in range(3000))
    Task.objects.filter(queue="done").update(status="completed", progress=1.0, owner=worker.name)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")
    Task.objects.submit("work", {})
    [task] = Task.objects.lease(worker, ["work"])
    statement, params = db.heartbeat_statement(TABLES, "default")
    params.update(
        pks=[task.pk],
        leases=[task.leases],
        progress=[0.5],
        started=[True],
        length=timedelta(seconds=30),
        reservation=timedelta(seconds=5),
        worker=worker.name,
    )
    plan = prepared_plan(statement, params, mode, analyze=True)
    scans = task_scans(plan["Plan"], table)
    read = sum(
        s["Actual Rows"] * s["Actual Loops"] + s.get("Rows Removed by Filter", 0) for s in scans
    )
    assert scans and read <= 10, plan
    assert Task.objects.get(pk=task.pk).progress == 0.5


def test_a_heartbeat_is_one_statement_of_a_few_parameters_however_many_leases():
    """40,000 leases in one heartbeat: a statement naming each lease needed 80,000 parameters,
    past PostgreSQL's 65,535; the arrays keep it one statement of eight. Each row is still
    fenced on its lease, and its run-time limit (`timeout_at`) caps its deadline."""
    from datetime import timedelta

    from django.test.utils import CaptureQueriesContext

    worker = Worker.objects.register(queues=["work"])
    Task.objects.submit_many(
        {"queue": "work", "spec": {"n": n}, **({"timeout": 5} if n == 1 else {})}
        for n in range(40_000)
    )
    leased = [t for _ in range(4) for t in Task.objects.lease(worker, ["work"], limit=10_000)]
    assert len(leased) == 40_000
    stale, capped = leased[0], leased[1]
    limit = capped.timeout_at
    assert limit is not None and capped.spec == {"n": 1}
    leases = {t.pk: (t.leases, None) for t in leased}
    leases[stale.pk] = (stale.leases + 1, None)  # not this lease: refused
    leases[capped.pk] = (capped.leases, 0.25)
    with CaptureQueriesContext(connection) as queries:
        extended = Task.objects.heartbeat_many(worker, leases, lease_length=timedelta(minutes=10))
    assert len(queries.captured_queries) == 1
    assert extended == set(leases) - {stale.pk}
    row = Task.objects.get(pk=capped.pk)
    assert row.deadline == limit and row.progress == 0.25
    assert Task.objects.get(pk=leased[2].pk).deadline > limit + timedelta(minutes=9)


@pytest.mark.parametrize("first", [0, 3000])
def test_plans_made_before_any_statistics_read_only_the_rows_they_take(first):
    """A worker's lease and finish are planned once per session, on their first call, and the
    plan is kept until the next ANALYZE. A worker that started with an empty table, or before
    the first ANALYZE of a new one, made its plans without statistics. Without the worker's
    session settings the lease and the finish then read every task in the table on every call
    (planned on an empty table), or the lease sorted every ready task of its queue (planned on
    3,000 tasks with no statistics): 3,000 to 4,000 rows here, more with every task
    submitted."""
    from django.db import transaction

    table = Task._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table} RESTART IDENTITY CASCADE")  # forgets reltuples too
    worker = Worker.objects.register(queues=["work"])
    try:
        db.use_worker_plans(connection)
        Task.objects.submit_many({"queue": "work", "spec": {"n": n}} for n in range(first))
        # The first calls: their plans are made now.
        [task] = Task.objects.lease(worker, ["work"]) or [None]
        outcome = Outcome(task.pk, task.leases) if task else Outcome(10**9, 1)
        Task.objects.finish_many(worker, [outcome])
        Task.objects.submit_many({"queue": "work", "spec": {"n": n}} for n in range(3000))

        def rows_read() -> int:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT seq_tup_read + idx_tup_fetch FROM pg_stat_xact_user_tables "
                    "WHERE relname = %s",
                    [table],
                )
                return int(cursor.fetchone()[0])

        with transaction.atomic():  # one transaction: its table counters cover both calls
            before = rows_read()
            [task] = Task.objects.lease(worker, ["work"])
            done = Task.objects.finish_many(worker, [Outcome(task.pk, task.leases, result=1)])
            read = rows_read() - before
        assert done == {task.pk}
        assert read <= 20, f"{read} task rows read for one lease and one finish"
    finally:
        connection.close()  # the session settings go with the session


def test_a_worker_s_heartbeat_of_thousands_of_leases_joins_them_in_one_pass():
    """The heartbeat as a worker's session runs it (its plan settings, the statement planned
    for its arrays): 3,000 leases are joined to their rows in one pass. Prepared, its generic
    plan could not see the arrays' length and rescanned them once per running task of the
    worker: 9 million rows here, 20 s for 5,000 leases."""
    from datetime import timedelta

    worker = Worker.objects.register(queues=["work"])
    Task.objects.submit_many({"queue": "work", "spec": {"n": n}} for n in range(3000))
    leased = Task.objects.lease(worker, ["work"], limit=3000)
    db.use_worker_plans(connection)
    statement, params = db.heartbeat_statement(TABLES, "default")
    params.update(
        pks=[t.pk for t in leased],
        leases=[t.leases for t in leased],
        progress=[None] * len(leased),
        started=[False] * len(leased),
        length=timedelta(seconds=30),
        reservation=timedelta(seconds=5),
        worker=worker.name,
    )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        [[[plan]]] = cursor.fetchall()

    def rows(node):
        own = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
        return own + sum(rows(child) for child in node.get("Plans", []))

    assert rows(plan["Plan"]) <= 10 * 3000, plan


def test_a_finish_and_lease_sends_the_finished_tasks_once_not_on_every_leased_row():
    """The statement that writes a worker's outcomes and leases its next tasks returns the
    finished pks and times on its first row only: repeated on every leased row, they were
    sent and parsed once per row (about 65 timestamps per task at the default prefetch)."""
    from datetime import timedelta

    worker = Worker.objects.register(queues=["work"])
    Task.objects.submit_many({"queue": "work", "spec": {"n": n}} for n in range(6))
    leased = Task.objects.lease(worker, ["work"], limit=3)
    statement, params = db.lease_statement(TABLES, "default", locked=False, finishing=True)
    finish = [
        {"id": t.pk, "lease": t.leases, "status": "completed", "result": None, "errors": None}
        for t in leased
    ]
    params.update(worker_id=worker.pk, worker=worker.name, queues=["work"], limit=3)
    params.update(lease_length=timedelta(minutes=1), locked=False, rows=json.dumps(finish))
    params.update(timeouts=[None], timeout_grace=timedelta(seconds=10))
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()

    assert len(rows) == 3  # one per task leased
    assert sorted(rows[0][2]) == sorted(t.pk for t in leased) and len(rows[0][3]) == 3
    assert [(row[2], row[3]) for row in rows[1:]] == [(None, None)] * 2
    assert Task.objects.filter(pk__in=[t.pk for t in leased], status="completed").count() == 3
