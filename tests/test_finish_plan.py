"""The worker's batched finish finds its rows by key: not by its owner, whose finished tasks
keep its name, nor by a walk of a table the planner knows nothing of."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from scylla_django import db
from scylla_django.models import History, Outcome, Task, Worker
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

    statement, params = db._finish_statement(Task.objects.all(), History)
    row = {"id": task.pk, "attempts": task.attempts, "status": "completed", "result": 1}
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
    """Found by key, each row is still fenced on its lease: a stale attempt is refused."""
    worker = Worker.objects.register(queues=["work"])
    first, second = (Task.objects.submit("work", {"n": n}) for n in range(2))
    leased = {t.pk: t for t in Task.objects.lease(worker, ["work"], limit=2)}
    done = Task.objects.finish_many(
        worker,
        [
            Outcome(first.pk, leased[first.pk].attempts, result=1),
            Outcome(second.pk, leased[second.pk].attempts + 1, result=2),
        ],
    )
    assert done == {first.pk}
    assert Task.objects.get(pk=second.pk).status == "running"


def test_a_heartbeat_reads_only_its_own_rows_however_many_tasks_its_worker_finished():
    """The heartbeat of a worker that has finished 3,000 tasks reads its leased rows only."""
    from django.test.utils import CaptureQueriesContext

    table = Task._meta.db_table
    worker = Worker.objects.register(queues=["work"])
    Task.objects.submit_many({"queue": "done", "spec": {"n": n}} for n in range(3000))
    Task.objects.filter(queue="done").update(status="completed", progress=1.0, owner=worker.name)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")
    Task.objects.submit("work", {})
    [task] = Task.objects.lease(worker, ["work"])
    with CaptureQueriesContext(connection) as queries:
        Task.objects.heartbeat_many(worker, {task.pk: (task.attempts, None)})
    [update] = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {update}")
        [[[plan]]] = cursor.fetchall()
        cursor.execute("ROLLBACK")
    scans = task_scans(plan["Plan"], table)
    read = sum(
        s["Actual Rows"] * s["Actual Loops"] + s.get("Rows Removed by Filter", 0) for s in scans
    )
    assert scans and read <= 10, plan


def test_plans_made_while_the_table_was_empty_do_not_read_it_whole_as_it_grows():
    """A worker's lease and finish are planned once per session, on their first call, and the
    plan is kept until the next ANALYZE. A worker that started before the first tasks made its
    plans on an empty table: without the worker's session settings, both read every task in the
    table on every call (3,000 rows here, then more with each task submitted)."""
    from django.db import transaction

    table = Task._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table} RESTART IDENTITY CASCADE")  # forgets reltuples too
    worker = Worker.objects.register(queues=["work"])
    try:
        db.use_worker_plans(connection)
        # The first calls, on an empty table: their plans are made now.
        assert Task.objects.lease(worker, ["work"]) == []
        assert Task.objects.finish_many(worker, [Outcome(1, 1, result=None)]) == set()
        Task.objects.submit_many({"queue": "work", "spec": {"n": n}} for n in range(3000))

        def sequential_reads() -> int:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relname = %s",
                    [table],
                )
                return int(cursor.fetchone()[0])

        with transaction.atomic():  # one transaction: its table counters cover both calls
            before = sequential_reads()
            [task] = Task.objects.lease(worker, ["work"])
            done = Task.objects.finish_many(worker, [Outcome(task.pk, task.attempts, result=1)])
            read = sequential_reads() - before
        assert done == {task.pk}
        assert read == 0, f"{read} task rows read sequentially"
    finally:
        connection.close()  # the session settings go with the session
