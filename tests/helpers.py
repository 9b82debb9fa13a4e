"""Helpers shared by the test modules: users, API clients, error assertions, expiring leases,
finished tasks with their History."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import Permission, User
from django.db import connection
from django.db.models.functions import Now
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scylla_django.db.clock import read_clock
from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task, Worker
from scylla_django.models.rollups import hour_of
from scylla_django.worker import TaskWorker
from tests.factories import TaskFactory

API = "/api/scylla"
ALL_PERMISSIONS = ("view_task", "submit_task", "cancel_task", "work_task")
CLIENT_PERMISSIONS = ("view_task", "submit_task", "cancel_task")
TASK_FIELDS = {
    "rn",
    "queue",
    "spec",
    "priority",
    "status",
    "progress",
    "created",
    "updated",
    "not_before",
    "errors",
    "result",
    "owner",
    "deadline",
    "leases",
    "retry_of",
    "root",
    "attempt",
    "unique_key",
    "unique_window",
    "locks",
    "limits",
    "order_key",
    "order_on_failure",
    "rate_key",
    "cpu_time",
    "peak_memory",
    "timeout",
    "parent",
    "snoozes",
    "expires_at",
    "batch",
    "dead",
    "notify",
    "notified",
    "version",
}


def grant(user: User, *codenames: str) -> None:
    """Give `user` these scylla_django permissions (as an operator would in the admin)."""
    perms = Permission.objects.filter(
        content_type__app_label="scylla_django", codename__in=codenames
    )
    assert perms.count() == len(codenames), "a permission is missing: run the migrations"
    user.user_permissions.add(*perms)


def make_user(username: str, *codenames: str, is_staff: bool = False) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=is_staff)
    grant(user, *codenames)
    return user


def token_header(user: User) -> str:
    """The user's `Authorization` header value."""
    token, _ = Token.objects.get_or_create(user=user)
    return f"Token {token.key}"


def client_for(user: User | None) -> APIClient:
    """An API client authenticated with the user's token (anonymous for None)."""
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=token_header(user))
    return client


def worker_of(user: User, queues: tuple[str, ...] = ("default",)) -> Worker:
    """A worker registered by `user` (as `POST /workers/` does)."""
    worker = Worker.objects.register(queues=list(queues), capacity=4)
    Worker.objects.filter(pk=worker.pk).update(user=user)
    return worker


def reload(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


def typs(task: Task | str) -> list[str]:
    """The event types of a task's history (the task or its rn), oldest first."""
    rows = History.objects.filter(**{"task__rn" if isinstance(task, str) else "task": task})
    return list(rows.order_by("id").values_list("typ", flat=True))


def post(client: APIClient, path: str, body: object = None):
    return client.post(f"{API}{path}", body, format="json")


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    return body


def assert_field_error(response, field: str, code: str) -> None:
    body = assert_error(response, 400, "invalid")
    assert code in [error["code"] for error in body["errors"][field]], body


# -- submit -------------------------------------------------------------------------------------


def expire(task: Task, by: timedelta = timedelta(seconds=1)) -> None:
    """Put a running task's deadline in the past (on the database clock), as if the lease had
    run out: its last write goes back too, since only a yield puts a deadline before it."""
    Task.objects.filter(pk=task.pk).update(
        deadline=Now() - by, updated=Now() - by - timedelta(seconds=1)
    )


def lock_waits() -> int:
    """How many sessions wait for a lock another holds, as the database shows them:
    PostgreSQL's `pg_stat_activity` (the test database's sessions), InnoDB's transactions in
    `LOCK WAIT` (the server's). SQLite shows none (a writer that waits for its one write lock
    retries inside the library): there this is always 0, and a test sees the wait otherwise."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
        elif connection.vendor == "mysql":
            # Not INNODB_TRX: it is a cache that a read within 0.1 s of the last one keeps.
            cursor.execute("SHOW ENGINE INNODB STATUS")
            return cursor.fetchone()[2].count("LOCK WAIT")
        else:
            return 0
        return int(cursor.fetchone()[0])


class Stopwatch:
    """Seconds passed on the database clock since it was made. A test bounds an age it reads
    (made `n` seconds old, then read) by `n` and `n` plus what really passed, not by a
    constant a loaded machine could exceed."""

    def __init__(self) -> None:
        self.started = read_clock(connection.alias)

    def seconds(self) -> float:
        return (read_clock(connection.alias) - self.started).total_seconds()

    def bounds(self, age: float, seconds: float, slack: float = 0.01) -> bool:
        """Whether `age` is at least `seconds` and at most `seconds` plus the time since
        (`slack` for the columns' and the clock's rounding)."""
        return seconds - slack <= age <= seconds + self.seconds() + slack


THREAD_TIMEOUT = 120.0  # seconds a concurrent job may take before the test fails


def run_in_threads(jobs: Sequence[Callable[[threading.Barrier], Any]]) -> list[Any]:
    """Run each job in its own thread and return their results, in order.

    Each thread opens its own connection first, then all wait on one barrier so that they start
    together; the barrier is passed to the job for any further rendezvous. A job's exception is
    re-raised here (after the barrier is broken so that the other jobs do not wait forever).
    """
    barrier = threading.Barrier(len(jobs))
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def run(index: int, job: Callable[[threading.Barrier], Any]) -> None:
        try:
            connection.ensure_connection()
            barrier.wait()
            results[index] = job(barrier)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            connection.close()

    threads = [
        threading.Thread(target=run, args=(i, job), name=f"job-{i}") for i, job in enumerate(jobs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(THREAD_TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread is still running (deadlock?)"
    if errors:
        # A BrokenBarrierError is only the echo of another thread's failure: report the cause.
        errors.sort(key=lambda exc: isinstance(exc, threading.BrokenBarrierError))
        raise errors[0]
    return [results[i] for i in range(len(jobs))]


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def staff(*codenames: str) -> Client:
    """A client logged in as a staff user holding only these scylla_django permissions."""
    user = User.objects.create_user(f"staff-{'-'.join(codenames) or 'none'}", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="scylla_django", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


def prepared_plan(
    statement: str, params: dict[str, Any], mode: str, analyze: bool = False
) -> dict[str, Any]:
    """The plan of `statement` (with `%(name)s` parameters) as PostgreSQL runs it prepared:
    `mode` is `force_generic_plan` (what a prepared statement may settle on) or
    `force_custom_plan`. With `analyze` it runs, and the plan has the rows each node read."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", statement)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m[1]) + 1}", statement)
    with connection.cursor() as cursor:
        args = ", ".join(cursor.mogrify("%s", [params[name]]) for name in names)
        cursor.execute(f"SET plan_cache_mode = {mode}")
        cursor.execute(f"PREPARE plan_probe AS {numbered}")
        try:
            options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
            cursor.execute(f"EXPLAIN ({options}) EXECUTE plan_probe({args})")
            [[[plan]]] = cursor.fetchall()
        finally:
            cursor.execute("DEALLOCATE plan_probe")
            cursor.execute("RESET plan_cache_mode")
    return plan  # type: ignore[no-any-return]


def task_scans(node: dict[str, Any], table: str) -> list[dict[str, Any]]:
    """The plan nodes under `node` that scan `table`."""
    found = [node] if node.get("Relation Name") == table and "Scan" in node["Node Type"] else []
    for child in node.get("Plans", []):
        found += task_scans(child, table)
    return found


def finished(queue: str, at: datetime, wait: float, aborted: bool = False) -> Task:
    """A task of `queue` first leased at `at`, `wait` seconds after its submission, and
    completed (or aborted) a second later, with its History."""
    task = TaskFactory(queue=queue)
    status = Status.ABORTED if aborted else Status.COMPLETED
    Task.objects.filter(pk=task.pk).update(
        created=at - timedelta(seconds=wait), leases=1, status=status
    )
    end = EventType.ABORT if aborted else EventType.COMPLETION
    History.objects.bulk_create(
        [
            History(task=task, typ=EventType.ASSIGNMENT, time=at),
            History(task=task, typ=end, time=at + timedelta(seconds=1)),
        ]
    )
    return task


def hour_ago(hours: int) -> datetime:
    """A moment in the middle of the hour `hours` before the current one."""
    return hour_of(timezone.now()) - timedelta(hours=hours) + timedelta(minutes=30, seconds=10)


def start_worker(worker: TaskWorker, **run: Any) -> threading.Thread:
    """Run `worker` (with `run()`'s keywords) on a daemon thread; stop it with `stop_worker`."""
    thread = threading.Thread(target=worker.run, kwargs=run, daemon=True)
    thread.start()
    return thread


def stop_worker(worker: TaskWorker, thread: threading.Thread, timeout: float = 60) -> None:
    """Stop a worker `start_worker` started and wait for its thread; fail if it outlives
    `timeout` seconds (the test would leak it into the next one)."""
    worker.stop()
    thread.join(timeout)
    assert not thread.is_alive(), f"the worker {worker!r} did not stop within {timeout:g} s"
