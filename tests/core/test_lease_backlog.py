"""Leasing from many queues: the plan, the order across queues, locked and delayed rows."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from scylla_django import db
from scylla_django.models import TABLES, QueueSetting, Task, Worker
from tests.helpers import prepared_plan, task_scans

pytestmark = pytest.mark.django_db(transaction=True)


def submit_over(queues: list[str], per_queue: int) -> None:
    Task.objects.submit_many(
        {"queue": queue, "spec": {"n": n}, "priority": (n * 7 + i) % 5}
        for i, queue in enumerate(queues)
        for n in range(per_queue)
    )


def expected_order(queues: list[str], limit: int) -> list[str]:
    ready = Task.objects.ready(queues).order_by("-priority", "created", "id")
    return list(ready.values_list("rn", flat=True)[:limit])


def sorts_over_task_rows(node: dict[str, Any], table: str) -> list[str]:
    """Sort nodes whose input reads the task table other than through a per-queue LIMIT."""

    def inputs(plan: dict[str, Any]) -> list[dict[str, Any]]:
        # A node's rows come from its outer/inner children; CTEs and subplans hang off it too.
        return [p for p in plan.get("Plans", []) if p.get("Parent Relationship") != "InitPlan"]

    def unlimited_scans(plan: dict[str, Any]) -> bool:
        if plan.get("Node Type") == "Limit":
            return False
        if plan.get("Relation Name") == table and "Scan" in plan["Node Type"]:
            return True
        return any(unlimited_scans(child) for child in inputs(plan))

    found = []
    if node.get("Node Type") in {"Sort", "Incremental Sort"} and any(
        unlimited_scans(child) for child in inputs(node)
    ):
        found.append(f"{node['Node Type']} on {node.get('Sort Key')}")
    for child in node.get("Plans", []):
        found += sorts_over_task_rows(child, table)
    return found


def lease_plan(
    worker: Worker,
    queues: list[str],
    limit: int,
    mode: str,
    analyze: bool = False,
    locked: bool = False,
):
    """The plan of the lease statement as PostgreSQL runs it prepared: `mode` is
    `force_generic_plan` (what a prepared statement may settle on) or `force_custom_plan`;
    `locked`: the statement of a lease from queues with a running-task limit."""
    statement, params = db.lease_statement(TABLES, "default", locked=locked)
    params.update(
        worker_id=worker.pk,
        worker=worker.name,
        queues=queues,
        limit=limit,
        lease_length=timedelta(seconds=30),
        timeouts=[None] * len(queues),
        timeout_grace=timedelta(seconds=10),
        locked=locked,
    )
    return prepared_plan(statement, params, mode, analyze)


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize("limit", [1, 10])
def test_the_lease_plan_walks_the_ready_index_per_queue_without_sorting_the_backlog(limit, mode):
    """EXPLAIN the prepared lease over 50 queues, with the plan PostgreSQL makes for the
    statement's parameters and with the generic one: no Sort reads the ready rows, only
    per-queue LIMITs."""
    queues = [f"q{n:02d}" for n in range(50)]
    submit_over(queues, 100)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Task._meta.db_table}")
    worker = Worker.objects.register(queues=queues)
    plan = lease_plan(worker, queues, limit, mode)
    root = plan["Plan"]
    table = Task._meta.db_table
    assert sorts_over_task_rows(root, table) == [], plan
    scans = task_scans(root, table)
    assert any(s.get("Index Name") == "scylla_task_ready_idx" for s in scans), plan
    assert all(s["Node Type"] != "Seq Scan" for s in scans), plan


def test_a_lease_over_many_queues_keeps_priority_then_age_order():
    queues = [f"o{n:02d}" for n in range(12)]
    submit_over(queues, 8)
    worker = Worker.objects.register(queues=queues)
    for limit in (1, 10, 7):
        want = expected_order(queues, limit)
        got = [t.rn for t in Task.objects.lease(worker, queues, limit=limit)]
        assert got == want


def test_a_delayed_task_at_the_head_of_a_queue_does_not_block_it():
    worker = Worker.objects.register(queues=["d"])
    later = timezone.now() + timedelta(hours=1)
    Task.objects.submit("d", {}, rn="delayed", priority=9, not_before=later)
    Task.objects.submit("d", {}, rn="low", priority=1)
    Task.objects.submit("e", {}, rn="other", priority=0)
    got = [t.rn for t in Task.objects.lease(worker, ["d", "e"], limit=5)]
    assert got == ["low", "other"]


@pytest.mark.postgres
def test_rows_another_lessee_holds_are_skipped_not_waited_for():
    """With the best row of each queue locked elsewhere, a lease takes the next best ones."""
    worker = Worker.objects.register(queues=["a", "b"])
    for rn, queue, priority in [("a1", "a", 9), ("a2", "a", 5), ("b1", "b", 8), ("b2", "b", 1)]:
        Task.objects.submit(queue, {}, rn=rn, priority=priority)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("BEGIN")
                cursor.execute(
                    f"SELECT id FROM {Task._meta.db_table} WHERE rn IN ('a1', 'b1') FOR UPDATE"
                )
                locked.set()
                release.wait(30)
                cursor.execute("ROLLBACK")
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        got = [t.rn for t in Task.objects.lease(worker, ["a", "b"], limit=2)]
    finally:
        release.set()
        holder.join(30)
    assert got == ["a2", "b2"]
    assert [t.rn for t in Task.objects.lease(worker, ["a", "b"], limit=2)] == ["a1", "b1"]


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_a_burst_the_statistics_have_not_seen_is_leased_without_walking_it(mode):
    """The statistics say ready rows are rare (most tasks finished); then a burst of ready tasks
    arrives before the next ANALYZE. The lease must touch only the rows it takes."""
    submit_over(["steady"], 3000)
    Task.objects.filter(queue="steady").update(status="completed", progress=1.0)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Task._meta.db_table}")
    submit_over(["burst"], 3000)
    worker = Worker.objects.register(queues=["burst"])
    Task.objects.lease(worker, ["burst"], limit=1)
    plan = lease_plan(worker, ["burst"], 1, mode, analyze=True)
    scans = task_scans(plan["Plan"], Task._meta.db_table)
    read = sum(
        s["Actual Rows"] * s["Actual Loops"] + s.get("Rows Removed by Filter", 0) for s in scans
    )
    assert read <= 10, plan
    assert Task.objects.filter(queue="burst", status="running").count() == 2


@pytest.mark.postgres
@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "limited"])
def test_the_lease_s_estimated_cost_follows_its_limit_not_the_backlog(limited):
    """PostgreSQL compiles a statement with JIT once its estimated cost passes `jit_above_cost`
    (100,000 by default): that took 55 ms per lease at a million ready rows over 50 queues,
    and 20 ms for queues with a running-task limit. The estimate must not grow with the rows
    waiting, on either path."""
    queues = [f"q{n:02d}" for n in range(50)]
    for queue in queues if limited else []:
        QueueSetting.objects.limit(queue, 1000)
    worker = Worker.objects.register(queues=queues)
    costs = []
    for per_queue in (50, 400):  # 50, then 450 rows per queue
        submit_over(queues, per_queue)
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Task._meta.db_table}, {QueueSetting._meta.db_table}")
        plan = lease_plan(worker, queues, 1, "force_custom_plan", locked=limited)
        costs.append(plan["Plan"]["Total Cost"])
    assert costs[1] < 1.5 * costs[0], costs


@pytest.mark.postgres
def test_a_worker_session_s_lease_is_never_jit_compiled():
    """A worker's session costs the sorts it cannot avoid as disabled (see
    `db.use_worker_plans`), which lifts the lease's estimate past `jit_above_cost`: compiled,
    each lease took half a second. The session turns JIT off."""
    queues = [f"q{n:02d}" for n in range(5)]
    submit_over(queues, 20)
    worker = Worker.objects.register(queues=queues)
    try:
        db.use_worker_plans(connection)
        plan = lease_plan(worker, queues, 1, "force_generic_plan", analyze=True)
    finally:
        connection.close()  # the session settings go with the session
    assert plan["Plan"]["Total Cost"] > 100_000  # what would have been compiled
    assert "JIT" not in plan, plan["JIT"]
