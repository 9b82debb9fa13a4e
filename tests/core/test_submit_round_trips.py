"""Submission on PostgreSQL: one statement in autocommit, duplicates found by the statement."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scylla_django.db import inserts
from scylla_django.exceptions import DuplicateTask
from scylla_django.models import Outcome, Task, Worker, serving
from scylla_django.retries import Fixed, Retry

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def known_live_queues() -> Iterator[None]:
    """Read the live workers' queues before each test: a submission reads them at most every
    few seconds (to warn about a queue nothing serves), never on each statement counted here."""
    serving.forget_live_worker_queues()
    serving.live_worker_queues()
    yield
    serving.forget_live_worker_queues()


@contextmanager
def round_trips() -> Iterator[tuple[list[str], list[bool]]]:
    """The statements run, and every autocommit switch (a BEGIN/COMMIT pair), in the block."""
    switches: list[bool] = []
    original = connection.set_autocommit

    def spy(autocommit: bool, *args: object, **kwargs: object) -> None:
        switches.append(autocommit)
        original(autocommit, *args, **kwargs)  # type: ignore[arg-type]

    connection.ensure_connection()
    connection.set_autocommit = spy  # type: ignore[method-assign]
    try:
        with CaptureQueriesContext(connection) as captured:
            statements: list[str] = []
            yield statements, switches
        statements += [q["sql"] for q in captured.captured_queries]
    finally:
        del connection.set_autocommit


def test_submit_is_one_statement_without_a_transaction_block():
    with round_trips() as (statements, switches):
        task = Task.objects.submit("one", {"n": 1}, rn="single")
    assert len(statements) == 1 and switches == []
    # The insert, unless the queue has a cap on ready tasks (read in the same statement).
    assert statements[0].startswith("WITH capped AS (")
    assert 'INSERT INTO "scylla_django_task"' in statements[0]
    assert "pg_notify" in statements[0]
    stored = Task.objects.get(rn="single")
    assert (task.pk, task.created, task.updated) == (stored.pk, stored.created, stored.updated)
    assert not task._state.adding and task._state.db == "default"


SPECS = [{"n": 1}, [1, "two"], "text", 7, 2.5, True, {}]


@pytest.mark.parametrize("n", range(len(SPECS)))
def test_the_task_submit_returns_is_the_row_it_wrote_field_by_field(n):
    """The returned task is built from the submitted values and the columns' defaults, not read
    back: every field must still equal the stored row's."""
    spec = SPECS[n]
    policy = Retry(max_attempts=2, backoff=Fixed(1))
    task = Task.objects.submit("one", spec, rn=f"same-{n}", priority=3, retry=policy)
    stored = Task.objects.get(pk=task.pk)
    fields = [f.attname for f in Task._meta.concrete_fields]
    assert {f: getattr(task, f) for f in fields} == {f: getattr(stored, f) for f in fields}
    assert (stored.spec, stored.status, stored.errors, stored.leases) == (spec, "ready", [], 0)


def test_submitted_tasks_share_no_default_that_can_change():
    """The returned tasks start from one row of defaults: a default made afresh per task (a
    new list of errors) is each task's own."""
    first = Task.objects.submit("own", {}, rn="own-1")
    first.errors.append({"code": "changed"})
    second = Task.objects.submit("own", {}, rn="own-2")
    assert second.errors == [] and second.errors is not first.errors
    assert second.status == "ready" and second.attempt == 1 and second.unique_held is False


def test_submit_with_a_retry_policy_is_still_one_statement():
    policy = Retry(max_attempts=3, backoff=Fixed(5))
    with round_trips() as (statements, switches):
        Task.objects.submit("one", {}, rn="with-retry", retry=policy)
    assert len(statements) == 1 and switches == []
    assert Task.objects.get(rn="with-retry").retry_policy == policy.as_json()


def test_a_duplicate_submission_is_detected_by_the_same_statement():
    Task.objects.submit("one", {"n": 1}, rn="twice")
    with round_trips() as (statements, switches), pytest.raises(DuplicateTask):
        Task.objects.submit("one", {"n": 2}, rn="twice")
    assert len(statements) == 1 and switches == []
    assert Task.objects.get(rn="twice").spec == {"n": 1}


def test_submit_many_inserts_a_small_batch_in_one_statement():
    items = [{"queue": "bulk", "spec": {"n": n}} for n in range(inserts.SUBMIT_CHUNK - 1)]
    with round_trips() as (statements, switches):
        outcomes = Task.objects.submit_many(items)
    assert len(statements) == 1 and switches == []
    assert {o.outcome for o in outcomes} == {"inserted"}


def test_submit_many_pipelines_thousands_in_one_transaction_with_per_item_outcomes():
    """Chunks of SUBMIT_CHUNK tasks, one statement each, sent in one pipeline: each chunk is
    validated while the statements before it are on their way or running."""
    from psycopg import pq

    Task.objects.submit("bulk", {}, rn="bulk-0007")
    pipelined: list[bool] = []

    def items():
        for n in range(2000):
            status = connection.connection.pgconn.pipeline_status
            pipelined.append(status != pq.PipelineStatus.OFF)
            yield {"queue": "bulk", "spec": {"n": n}, "rn": f"bulk-{n:04d}"}

    with round_trips() as (statements, switches):
        outcomes = Task.objects.submit_many(
            {"queue": "bad queue", "spec": {}} if n == 10 else item
            for n, item in enumerate(items())
        )
    assert switches == [False, True]  # one transaction
    sent = [s for s in statements if s not in ("BEGIN", "COMMIT")]
    assert len(sent) == math.ceil(1998 / inserts.SUBMIT_CHUNK)
    assert all("jsonb_to_recordset" in statement for statement in sent)
    # Past the first chunk, every item was validated with the pipeline open.
    assert pipelined[inserts.SUBMIT_CHUNK + 2 :] and all(pipelined[inserts.SUBMIT_CHUNK + 2 :])
    kinds = [o.outcome for o in outcomes]
    assert kinds[7] == "duplicate" and kinds[10] == "invalid"
    assert kinds.count("inserted") == 1998
    assert Task.objects.filter(queue="bulk").count() == 1999
    assert Task.objects.get(rn="bulk-1999").spec == {"n": 1999}


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_submit_lease_and_finish_are_prepared_once_per_connection(worker):
    connection.close()  # a new session: nothing prepared yet
    for n in range(3):
        Task.objects.submit("prep", {"n": n}, rn=f"prep-{n}")
    Task.objects.submit_many([{"queue": "prep", "spec": {}, "rn": "prep-bulk"}])
    leased = Task.objects.lease(worker, ["prep"], limit=4)
    Task.objects.finish_many(worker, [Outcome(t.pk, t.leases, result=1) for t in leased])
    for n in range(3):
        Task.objects.submit("prep", {"n": n}, rn=f"prep-next-{n}")
    [first] = Task.objects.lease(worker, ["prep"])
    for _ in range(2):  # each outcome with the next lease
        _, [first] = Task.objects.finish_and_lease(
            worker, [Outcome(first.pk, first.leases, result=1)], ["prep"]
        )
    prepared = prepared_statements()
    assert sum("RETURNING id, created, updated" in s for s in prepared) == 1  # submit
    assert sum("RETURNING rn, queue" in s for s in prepared) == 1  # submit_many
    finishes = [s for s in prepared if "WITH outcome AS" in s]
    assert len(finishes) == 2  # finish_many, and finish_and_lease (a lease in it)
    assert sum("SKIP LOCKED" in s for s in finishes) == 1
    # The lease too, with the ready status written in, so a generic plan keeps the ready index.
    assert sum("SKIP LOCKED" in s and "t.status = 'ready'" in s for s in prepared) == 2
    assert Task.objects.filter(queue="prep", status="completed").count() == 6
    assert Task.objects.get(pk=first.pk).status == "running"


def test_the_hot_statements_share_one_cursor_per_session_which_goes_with_it(worker):
    from scylla_django import db

    connection.close()
    shared = db.prepared_cursor(connection)
    with shared:  # closing it keeps it for the next statement
        pass
    Task.objects.submit("share", {}, rn="share-1")
    [task] = Task.objects.lease(worker, ["share"])
    Task.objects.finish_many(worker, [Outcome(task.pk, task.leases, result=1)])
    assert db.prepared_cursor(connection) is shared and not shared.cursor.closed
    assert db.prepared_cursor(connection, shared=False) is not shared  # a pipeline's own
    with CaptureQueriesContext(connection) as captured:  # the query log has a cursor of its own
        logged = db.prepared_cursor(connection)
        Task.objects.submit("share", {}, rn="share-2")
        assert Task.objects.lease(worker, ["share"]) != []
    assert logged is not shared and db.prepared_cursor(connection) is shared
    # Each statement logged as itself, not as the one before it on the same cursor.
    [insert, lease] = [q["sql"] for q in captured.captured_queries]
    assert 'INSERT INTO "scylla_django_task"' in insert and "SKIP LOCKED" in lease
    connection.close()  # a new session, a new cursor: the old one went with its session
    Task.objects.submit("share", {}, rn="share-3")
    assert db.prepared_cursor(connection) is not shared
    assert Task.objects.get(pk=task.pk).status == "completed"
    assert Task.objects.filter(queue="share").count() == 3


@pytest.mark.parametrize("how", ["setting", "server_side_cursors_disabled", "psycopg2"])
def test_nothing_is_prepared_when_turned_off(how, settings, monkeypatch):
    if how == "setting":
        settings.SCYLLA = {"PREPARED_STATEMENTS": False}
    elif how == "psycopg2":
        monkeypatch.setattr("django.db.backends.postgresql.psycopg_any.is_psycopg3", False)
    else:
        monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    connection.close()
    Task.objects.submit("prep", {}, rn="unprepared")
    Task.objects.submit_many([{"queue": "prep", "spec": {}, "rn": "unprepared-bulk"}])
    # Several chunks: statements one after another (no pipeline), in one transaction.
    outcomes = Task.objects.submit_many(
        {"queue": "prep", "spec": {"n": n}} for n in range(2 * inserts.SUBMIT_CHUNK + 1)
    )
    assert {o.outcome for o in outcomes} == {"inserted"}
    worker = Worker.objects.register(queues=["prep"])
    [first] = Task.objects.lease(worker, ["prep"])
    _, leased = Task.objects.finish_and_lease(worker, [Outcome(first.pk, 1)], ["prep"])
    assert prepared_statements() == []
    assert len(leased) == 1 and leased[0].status == "running"
    assert Task.objects.filter(queue="prep").count() == 2 * inserts.SUBMIT_CHUNK + 3
    assert Task.objects.get(pk=first.pk).status == "completed"


def plan_cache_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return cursor.fetchone()[0]


def show(setting: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {setting}")
        return cursor.fetchone()[0]


def test_use_worker_plans_sets_each_new_session_once():
    from scylla_django import db

    try:
        for _ in range(2):  # a new session (after a lost connection) gets it again
            connection.close()
            settings = ("enable_seqscan", "enable_sort", "jit")
            assert (plan_cache_mode(), *map(show, settings)) == ("auto", "on", "on", "on")
            db.use_worker_plans(connection)
            db.use_worker_plans(connection)
            assert (plan_cache_mode(), *map(show, settings)) == (
                "force_generic_plan",
                "off",
                "off",
                "off",
            )
    finally:
        connection.close()


def test_the_worker_s_lease_loop_and_writer_ask_for_worker_plans(monkeypatch):
    from scylla_django import db
    from scylla_django.handlers import HandlerRegistry
    from scylla_django.worker import TaskWorker, WorkerOptions

    sessions = []
    real = db.use_worker_plans

    def spy(conn):
        real(conn)
        with conn.cursor() as cursor:
            cursor.execute("SHOW plan_cache_mode")
            sessions.append((threading.current_thread().name, cursor.fetchone()[0]))

    monkeypatch.setattr(db, "use_worker_plans", spy)
    registry = HandlerRegistry()
    registry.register("generic", lambda ctx: None)
    Task.objects.submit("generic", {})
    TaskWorker(WorkerOptions(["generic"], registry=registry, poll_interval=0.05)).run(once=True)
    assert {mode for _, mode in sessions} == {"force_generic_plan"}
    assert {"MainThread", "scylla-writer"} <= {thread for thread, _ in sessions}
    assert Task.objects.get(queue="generic").status == "completed"
    connection.close()  # this thread's session had the worker's settings


def test_no_generic_plans_without_prepared_statements(settings):
    from scylla_django import db

    settings.SCYLLA = {"PREPARED_STATEMENTS": False}
    connection.close()
    db.use_worker_plans(connection)
    assert plan_cache_mode() == "auto"


def test_a_bulk_submission_keeps_a_timeout_too_small_for_a_float_s_plain_form():
    """A duration travels to PostgreSQL in whole microseconds: 10 µs is not "1e-05 seconds",
    which PostgreSQL cannot read as an interval."""
    [outcome] = Task.objects.submit_many(
        [{"queue": "q", "spec": {}, "timeout": timedelta(microseconds=10)}]
    )
    assert Task.objects.get(rn=outcome.rn).timeout == timedelta(microseconds=10)


def test_a_capped_queue_is_found_by_the_submission_s_own_statement():
    """A submission to a capped queue: the one statement inserts nothing and says so, and the
    submission then goes through the cap (`models.admission`); an uncapped queue's stays one
    statement, a duplicate rn too."""
    from scylla_django.models import QueueSetting

    QueueSetting.objects.cap("capped", 1)
    with round_trips() as (statements, _):
        Task.objects.submit("capped", {}, rn="c1")
    assert statements[0].startswith("WITH capped AS (")
    assert len(statements) > 1  # then the cap's transaction
    outcomes = Task.objects.submit_many(
        [
            {"queue": "capped", "spec": {}},
            {"queue": "free", "spec": {}},
            {"queue": "free", "spec": {}, "rn": "c1"},
        ]
    )
    assert [o.outcome for o in outcomes] == ["full", "inserted", "duplicate"]
