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
