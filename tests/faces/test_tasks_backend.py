"""Django's Tasks framework on Scylla: enqueue, run with scylla_worker, read the result."""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta

import django
import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.utils import timezone

from scylla_django.backends import (
    HAS_DJANGO_TASKS,
    django_priority,
    register_handlers,
    run_django_task,
)
from scylla_django.enums import Status
from scylla_django.handlers import autodiscover, registry
from scylla_django.models import Task
from scylla_django.worker import TaskWorker, WorkerOptions

if HAS_DJANGO_TASKS:
    from scylla_django.backends import ScyllaBackend

pytestmark = [
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is new in Django 6.0"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(autouse=True)
def handlers():
    autodiscover()
    register_handlers()


def run_worker(*queues: str) -> None:
    TaskWorker(WorkerOptions(list(queues), concurrency=4, poll_interval=0.05)).run(once=True)


def test_django_s_own_start_and_finish_lines_are_not_kept_as_a_task_log(settings, tmp_path):
    """Each Django task logs its start through `django.tasks`; that alone stores no log."""
    from tests.django_tasks import add

    settings.STORAGES = {
        **settings.STORAGES,
        "tasklogs": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path)},
        },
    }
    settings.SCYLLA = {**settings.SCYLLA, "TASK_LOG_STORAGE": "tasklogs"}
    result = add.enqueue(1, 2)
    run_worker("default")
    task = Task.objects.get(rn=result.id)
    assert (task.status, task.result, task.log) == (Status.COMPLETED, 3, None)
    assert not (tmp_path / "scylla_django").exists()


def test_priorities_map_linearly_onto_0_to_255():
    assert [django_priority(p) for p in (-100, -1, 0, 1, 50, 100)] == [0, 126, 128, 129, 191, 255]


def test_enqueue_submits_a_scylla_task_and_the_worker_runs_it():
    from django.tasks import TaskResultStatus

    from tests.django_tasks import add

    result = add.enqueue(2, b=3)
    task = Task.objects.get(rn=result.id)
    assert (task.queue, task.priority, task.status) == ("default", 128, Status.READY)
    assert task.spec == {
        "django_task": "tests.django_tasks.add",
        "args": [2],
        "kwargs": {"b": 3},
        "priority": 0,
        "backend": "default",
    }
    assert result.status == TaskResultStatus.READY and result.enqueued_at == task.created

    run_worker("default")
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.started_at is not None and result.finished_at >= result.started_at
    assert result.worker_ids == [task.__class__.objects.get(pk=task.pk).owner]
    assert add.get_result(result.id).return_value == 5


@pytest.mark.postgres
def test_enqueue_is_one_statement_on_postgresql():
    from django.test.utils import CaptureQueriesContext

    from tests.django_tasks import add

    if connection.vendor != "postgresql":
        pytest.skip("one statement per enqueue is PostgreSQL's path")
    with CaptureQueriesContext(connection) as queries:
        result = add.enqueue(1, b=2)
    assert len(queries.captured_queries) == 1, [q["sql"] for q in queries.captured_queries]
    assert result.started_at is None and result.worker_ids == []


def test_queue_priority_and_run_after():
    from tests.django_tasks import send

    later = timezone.now() + timedelta(hours=1)
    result = send.using(run_after=later).enqueue("a@b.c")
    task = Task.objects.get(rn=result.id)
    assert (task.queue, task.priority, task.not_before) == ("dj-mail", 255, later)
    run_worker("dj-mail")
    assert Task.objects.get(pk=task.pk).status == Status.READY  # not before its time
    Task.objects.filter(pk=task.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    run_worker("dj-mail")
    assert send.get_result(result.id).return_value == {"to": "a@b.c", "subject": "hello"}


def test_an_exception_is_a_failed_result_with_its_class_and_traceback():
    from django.tasks import TaskResultStatus

    from tests.django_tasks import explode

    result = explode.enqueue()
    run_worker("default")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is KeyError
    assert "missing" in error.traceback
    with pytest.raises(ValueError):
        result.return_value  # noqa: B018


def test_a_cancelled_task_is_failed_and_context_counts_attempts():
    from django.tasks import TaskResultStatus

    from tests.django_tasks import add, attempt

    cancelled = add.enqueue(1, 1)
    Task.objects.get(rn=cancelled.id).cancel()
    assert add.get_result(cancelled.id).status == TaskResultStatus.FAILED
    counted = attempt.enqueue()
    run_worker("default")
    assert attempt.get_result(counted.id).return_value == 1


def test_unknown_results_and_invalid_queues():
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist

    from tests.django_tasks import add

    with pytest.raises(TaskResultDoesNotExist):
        add.get_result("no-such-id")
    plain = Task.objects.submit("default", {"not": "a django task"})
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(plain.rn)
    with pytest.raises(InvalidTask):
        add.using(queue_name="elsewhere").enqueue(1, 2)


def test_a_backend_option_gives_its_tasks_a_retry_policy(settings):
    from tests.django_tasks import add

    settings.TASKS = {
        "default": {
            "BACKEND": "scylla_django.backends.ScyllaBackend",
            "QUEUES": ["default", "dj-mail"],
            "OPTIONS": {"RETRY": {"max_attempts": 4, "backoff": "fixed", "delay": 5}},
        }
    }
    result = add.enqueue(1, b=2)
    policy = Task.objects.get(rn=result.id).retry_policy
    assert (policy["max_attempts"], policy["backoff"], policy["delay"]) == (4, "fixed", 5)


def test_task_finished_is_sent_after_the_outcome_with_the_final_result():
    from django.tasks import TaskResultStatus
    from django.tasks.signals import task_finished

    from tests.django_tasks import add, explode

    seen: list[tuple[str, object, str | None]] = []

    def receiver(sender, task_result, **kwargs):
        stored = Task.objects.get(rn=task_result.id).status
        seen.append((task_result.id, task_result.status, stored))

    task_finished.connect(receiver)
    try:
        ok, failed, cancelled = add.enqueue(1, 2), explode.enqueue(), add.enqueue(3, 4)
        Task.objects.get(rn=cancelled.id).cancel()
        run_worker("default")
    finally:
        task_finished.disconnect(receiver)
    assert sorted(seen) == sorted(
        [
            (ok.id, TaskResultStatus.SUCCESSFUL, Status.COMPLETED),
            (failed.id, TaskResultStatus.FAILED, Status.ABORTED),
            (cancelled.id, TaskResultStatus.FAILED, Status.CANCELLED),
        ]
    )


def test_the_worker_runs_a_first_attempt_without_reading_it_back(monkeypatch):
    """The leased row is the task's state: no History or task read before or after the run."""
    from django.db.backends.utils import CursorWrapper
    from django.tasks import TaskResultStatus
    from django.tasks.signals import task_finished, task_started

    from scylla_django.models import History
    from tests.django_tasks import add

    statements: list[str] = []  # from every thread: the worker runs handlers in its own
    execute = CursorWrapper._execute

    def spy(self, sql, *args, **kwargs):
        statements.append(sql)
        return execute(self, sql, *args, **kwargs)

    results = []
    task_started.connect(receiver := lambda sender, task_result, **kw: results.append(task_result))
    task_finished.connect(receiver)
    try:
        enqueued = add.enqueue(2, 3)
        monkeypatch.setattr(CursorWrapper, "_execute", spy)
        run_worker("default")
        monkeypatch.undo()
    finally:
        task_started.disconnect(receiver)
        task_finished.disconnect(receiver)
    started, finished = results
    # The task as enqueued, built once for both signals.
    assert finished.task is started.task and started.task == enqueued.task
    stored = Task.objects.get(rn=enqueued.id)
    [assigned] = stored.history.filter(typ="TaskAssignment").values_list("time", "worker")
    assert (started.status, finished.status) == (
        TaskResultStatus.RUNNING,
        TaskResultStatus.SUCCESSFUL,
    )
    assert started.started_at == finished.started_at == assigned[0]
    assert finished.worker_ids == [assigned[1]]
    assert (finished.return_value, finished.finished_at) == (5, stored.updated)
    quote = connection.ops.quote_name  # "name" on PostgreSQL and SQLite, `name` on MariaDB
    history, tasks = quote(History._meta.db_table), quote(Task._meta.db_table)
    assert any(tasks in sql for sql in statements)  # the spy saw the worker's writes
    reads = [
        sql
        for sql in statements
        if sql.lstrip().upper().startswith("SELECT")
        and (f"{history}.{quote('time')}" in sql or f"WHERE {tasks}.{quote('rn')} =" in sql)
    ]
    assert not reads


def test_get_result_keeps_the_using_overrides():
    from tests.django_tasks import send

    later = timezone.now() + timedelta(hours=1)
    enqueued = send.using(priority=-7, queue_name="default", run_after=later).enqueue("a@b.c")
    fetched = send.get_result(enqueued.id)
    assert fetched.task == enqueued.task
    assert (fetched.task.priority, fetched.task.queue_name, fetched.task.run_after) == (
        -7,
        "default",
        later,
    )
    assert fetched == enqueued


def test_get_result_of_a_task_enqueued_as_defined_gives_the_module_s_own_task():
    """Nothing to restore from the spec: no copy (a copy would validate the task again)."""
    from tests.django_tasks import send

    enqueued = send.enqueue("a@b.c")
    fetched = send.get_result(enqueued.id)
    assert fetched.task is send
    assert fetched == enqueued


def test_a_task_that_cannot_be_imported_records_its_import_error():
    from tests.django_tasks import add

    result = add.enqueue(1, 1)
    task = Task.objects.get(rn=result.id)
    Task.objects.filter(pk=task.pk).update(
        spec={**task.spec, "django_task": "tests.django_tasks.gone"}
    )
    run_worker("default")
    task.refresh_from_db()
    assert task.status == Status.ABORTED
    [error] = task.errors
    assert error["code"] == "exception"
    assert error["args"]["type"] == "builtins.ImportError"
    assert "gone" in error["args"]["traceback"]


def test_django_s_log_of_a_failed_task_carries_its_exception_and_traceback(caplog):
    """Django's receiver of `task_finished` logs a failed task at ERROR with `sys.exc_info()`:
    the signal is sent while what the task raised is the exception being handled."""
    from tests.django_tasks import explode

    result = explode.enqueue()
    caplog.set_level("INFO", logger="django.tasks")
    run_worker("default")
    [record] = [
        r
        for r in caplog.records
        if r.name == "django.tasks"
        and f"id={result.id}" in r.getMessage()
        and "FAILED" in r.getMessage()
    ]
    assert record.levelname == "ERROR"
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    assert str(record.exc_info[1]) == "'missing'"
    assert 'raise KeyError("missing")' in caplog.text  # the traceback, down to the task's line


def run_until_it_returns(worker: TaskWorker, **kwargs) -> None:
    thread = threading.Thread(target=worker.run, kwargs=kwargs, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "the worker never returned"


def test_a_receiver_that_fails_after_the_outcome_frees_the_slot(caplog):
    """A task whose path names a plain function: the handler aborts it, then sending Django's
    `task_finished` raises (a function has no `backend`) once the outcome is committed. The
    error is logged with its traceback, never the task's, and the slot is freed: `--once`
    returns, and a worker that goes on runs the next task."""
    from tests.django_tasks import add

    spec = {"django_task": "tests.django_tasks.plain", "args": [], "kwargs": {}}
    for attempt in ("once", "on"):
        Task.objects.submit("default", spec, rn=f"plain-{attempt}", priority=255)
        normal = add.enqueue(1, 2)
        options = WorkerOptions(["default"], concurrency=1, poll_interval=0.05)
        if attempt == "once":
            worker = TaskWorker(options)
            run_until_it_returns(worker, once=True)
            assert worker.in_flight_count() == 0
            run_until_it_returns(TaskWorker(options), once=True)
        else:  # the handler thread writes the outcome and leases the next task itself
            worker = TaskWorker(dataclasses.replace(options, max_tasks=2))
            run_until_it_returns(worker)
            assert worker.in_flight_count() == 0
        assert Task.objects.get(rn=f"plain-{attempt}").status == Status.ABORTED
        assert Task.objects.get(rn=normal.id).status == Status.COMPLETED
    failures = [r for r in caplog.records if r.name == "scylla_django" and r.exc_info]
    assert len(failures) == 2
    assert all(r.exc_info[0] is AttributeError for r in failures)
    assert "could not yield" not in caplog.text


class SubclassedBackend(ScyllaBackend if HAS_DJANGO_TASKS else object):  # type: ignore[misc]
    """A project's own subclass of the backend."""


@pytest.fixture
def scratch_registry(monkeypatch):
    """The global handler registry, restored after the test."""
    monkeypatch.setattr(registry, "_handlers", dict(registry._handlers))
    return registry


def test_a_subclass_of_the_backend_gets_the_worker_handler(settings, scratch_registry):
    settings.TASKS = {
        "default": {"BACKEND": f"{__name__}.SubclassedBackend", "QUEUES": ["sub-queue"]}
    }
    register_handlers()
    assert scratch_registry.get("sub-queue") is run_django_task


def check_ids(settings, tasks, installed=None) -> list[str]:
    from django.tasks.checks import check_tasks

    settings.TASKS = tasks
    if installed is not None:
        settings.INSTALLED_APPS = installed
    return [message.id for message in check_tasks()]


def test_check_reports_scylla_django_missing_from_installed_apps(settings):
    tasks = {"default": {"BACKEND": "scylla_django.backends.ScyllaBackend"}}
    apps_without = [app for app in settings.INSTALLED_APPS if app != "scylla_django"]
    assert check_ids(settings, tasks) == []
    assert check_ids(settings, tasks, apps_without) == ["scylla_django.E013"]


def test_check_reports_a_queue_with_a_handler_of_its_own_and_a_bad_queue_name(
    settings, scratch_registry
):
    def own_handler(ctx):
        return None

    scratch_registry.register("reports-dj", own_handler)
    tasks = {
        "default": {
            "BACKEND": "scylla_django.backends.ScyllaBackend",
            "QUEUES": ["reports-dj", "-bad", "fine"],
        }
    }
    assert check_ids(settings, tasks) == ["scylla_django.E011", "scylla_django.E012"]
    with pytest.raises(SystemCheckError, match="E012"):
        call_command("scylla_worker", "--queue", "fine", "--once", skip_checks=False)


def test_queues_written_as_a_string_is_an_error_not_one_queue_a_letter(settings, scratch_registry):
    tasks = {"default": {"BACKEND": "scylla_django.backends.ScyllaBackend", "QUEUES": "default"}}
    assert check_ids(settings, tasks) == ["scylla_django.E014"]
    from django.tasks.checks import check_tasks

    [error] = check_tasks()
    assert "is the string 'default', not a list" in error.msg
    assert error.hint == "Write a list: 'QUEUES': ['default']."
    register_handlers()
    assert [q for q in "default" if scratch_registry.serves(q)] == []  # no queue a letter
    with pytest.raises(SystemCheckError, match="E014"):
        call_command("scylla_worker", "--queue", "d", "--once", skip_checks=False)


def test_a_backend_option_gives_a_task_functions_tasks_keys(settings):
    from tests.django_tasks import add

    settings.TASKS = {
        "default": {
            "BACKEND": "scylla_django.backends.ScyllaBackend",
            "QUEUES": ["default", "dj-mail"],
            "OPTIONS": {
                "KEYS": {
                    "tests.django_tasks.add": {
                        "locks": lambda spec: [f"sum:{spec['args'][0]}"],
                        "order_key": "sums",
                    }
                }
            },
        }
    }
    if connection.vendor == "mysql":
        pytest.skip("keys are refused on MySQL")
    result = add.enqueue(7, b=2)
    task = Task.objects.get(rn=result.id)
    assert (task.keys, task.order_key) == (["L:sum:7", "O:sums"], "sums")


def test_a_bad_keys_option_is_a_system_check_error(settings):
    settings.TASKS = {
        "default": {
            "BACKEND": "scylla_django.backends.ScyllaBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"KEYS": {"tests.django_tasks.add": {"locks": "not-a-list"}}},
        }
    }
    with pytest.raises(SystemCheckError, match=r"scylla_django\.E020"):
        call_command("check")
