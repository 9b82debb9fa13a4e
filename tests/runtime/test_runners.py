"""One table of handler behaviours, run through every way of running a task: the worker (in
threads, and under `--isolation process` as a real process), `manage.py scylla_run` (a real
process), `scylla_django.testing.run_task` and `drain`, and the eager mode. Each must leave the
same in the database: statuses, results, errors, History, children, retries, task logs, what
the run used and what the handler wrote in its fenced block."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from scylla_django.enums import EventType, Status
from scylla_django.models import Task
from scylla_django.retries import Fixed, Retry
from scylla_django.testing import drain, run_task
from scylla_django.worker import TaskWorker, WorkerOptions
from tests import runner_handlers
from tests.helpers import typs
from tests.processes import ROOT, child_env, finish, start, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HANDLERS = f"--handlers={runner_handlers.__name__}"
A, C, X, S = EventType.ASSIGNMENT, EventType.COMPLETION, EventType.ABORT, EventType.SNOOZE


@dataclass(frozen=True)
class Row:
    """A task to submit (lower rows have lower priority: a worker takes them later) and what
    every runner must leave of it."""

    queue: str
    spec: dict[str, Any]
    expected: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)


def finished(status: str, history: list[str], **more: Any) -> dict[str, Any]:
    picture = {
        "status": status,
        "history": history,
        "result": None,
        "errors": [],
        "dead": False,
        "snoozes": 0,
        "children": [],
        "retries": [],
        "cpu_time": True,
        "log": [],
        "traceback": False,
        "fenced": False,
    }
    return {**picture, **more}


TABLE: dict[str, Row] = {
    "complete": Row(
        "r-complete",
        {"n": 1},
        finished(
            Status.COMPLETED,
            [A, C],
            result={"got": {"n": 1}},
            log=["complete ran"],
            fenced=True,
        ),
    ),
    "abort": Row(
        "r-abort",
        {"n": 2},
        finished(
            Status.ABORTED,
            [A, X],
            errors=["refused"],
            dead=True,
            log=["abort ran"],
            traceback=True,
        ),
    ),
    "retry": Row(
        "r-raise",
        {"n": 3},
        finished(
            Status.ABORTED,
            [A, X],
            errors=["exception"],
            retries=[(Status.READY, 2)],
            log=["raise ran"],
            traceback=True,
        ),
        {"retry": Retry(max_attempts=2, backoff=Fixed(300))},
    ),
    "snooze": Row(
        "r-snooze",
        {"n": 4},
        finished(
            Status.READY,
            [A, S],
            snoozes=1,
            cpu_time=False,
            log=["snooze ran"],
            traceback=True,
        ),
    ),
    "spawn": Row(
        "r-spawn",
        {"n": 5},
        finished(
            Status.COMPLETED,
            [A, C],
            result={"spawned": 2},
            children=[
                ("r-sink", {"child": 0}, Status.READY),
                ("r-sink", {"child": 1}, Status.READY),
            ],
            log=["spawn ran"],
        ),
    ),
    "fan-out": Row(
        "r-fan-out",
        {"n": 6},
        finished(
            Status.COMPLETED,
            [A, C],
            result={"members": 2},
            children=[
                ("r-callback", {"callback": True}, Status.READY),
                ("r-sink", {"member": 0}, Status.READY),
                ("r-sink", {"member": 1}, Status.READY),
            ],
            log=["fan-out ran"],
        ),
    ),
    "batched": Row(
        "r-bundled",
        {"n": 7},
        finished(Status.COMPLETED, [A, C], result={"member": 7}, log=["batched ran"]),
    ),
    "batched too": Row(
        "r-bundled",
        {"n": 8},
        finished(Status.COMPLETED, [A, C], result={"member": 8}, log=["batched ran"]),
    ),
    "timeout": Row(
        "r-timed",
        {"n": 9},
        finished(
            Status.ABORTED, [A, X], errors=["timeout"], dead=True, log=["timed ran"], traceback=True
        ),
    ),
}
QUEUES = sorted({row.queue for row in TABLE.values()})


def submit_table() -> dict[str, Task]:
    """Submit the table's tasks, the first row with the highest priority."""
    return {
        name: Task.objects.submit(row.queue, row.spec, priority=100 - n, **row.options)
        for n, (name, row) in enumerate(TABLE.items())
    }


def picture(task: Task) -> dict[str, Any]:
    """What a run left of `task` in the database."""
    task.refresh_from_db()
    text = task.read_log() or ""
    marker = f"scylla_django.task: [{task.rn}] "
    children = Task.objects.filter(parent=task.rn).exclude(retry_of__isnull=False)
    return {
        "status": task.status,
        "history": typs(task),
        "result": task.result,
        "errors": [error["code"] for error in task.errors],
        "dead": task.dead is not None,
        "snoozes": task.snoozes,
        "children": sorted(
            ((c.queue, c.spec, c.status) for c in children), key=lambda c: json.dumps(c[1])
        ),
        "retries": [(r.status, r.attempt) for r in Task.objects.filter(retry_of=task.rn)],
        "cpu_time": task.cpu_time is not None,
        "log": [line.split(marker, 1)[1] for line in text.splitlines() if marker in line],
        "traceback": "Traceback (most recent call last)" in text,
        "fenced": User.objects.filter(username=f"fenced-{task.rn}").exists(),
    }


# -- the runners ------------------------------------------------------------------------------


@dataclass
class Ran:
    """What a runner reports besides the database: `scylla_run`'s exit status and stderr by
    task, the tasks `drain()` returned."""

    exit_codes: dict[str, int] = field(default_factory=dict)
    stderr: dict[str, str] = field(default_factory=dict)
    drained: list[Task] | None = None


def thread_worker(tasks: dict[str, Task], logs: Path) -> Ran:
    TaskWorker(WorkerOptions(QUEUES, concurrency=len(TABLE), poll_interval=0.05)).run(once=True)
    return Ran()


def process_worker(tasks: dict[str, Task], logs: Path) -> Ran:
    """`scylla_worker --isolation process`, one handler at a time (so the task with a run-time
    limit, submitted last, is leased once the child process is up)."""
    process = start(
        "scylla_worker",
        *(f"--queue={q}" for q in QUEUES),
        "--isolation=process",
        "--concurrency=1",
        "--prefetch=0",
        "--poll-interval=0.1",
        HANDLERS,
        env={"SCYLLA_TEST_LOG_DIR": str(logs)},
    )
    pks = [task.pk for task in tasks.values()]
    try:
        wait_until(
            lambda: (
                not Task.objects.filter(pk__in=pks, leases=0).exists()
                and not Task.objects.filter(pk__in=pks, status=Status.RUNNING).exists()
            ),
            timeout=180,
            what="every task run once",
        )
    finally:
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, timeout=60)
    assert code == 0, output
    return Ran()


def scylla_run(tasks: dict[str, Task], logs: Path) -> Ran:
    ran = Ran()
    for name, task in tasks.items():
        process = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "scylla_run", task.rn, HANDLERS],
            capture_output=True,
            text=True,
            env={**child_env(), "SCYLLA_TEST_LOG_DIR": str(logs)},
            cwd=ROOT,
            timeout=120,
        )
        ran.exit_codes[name] = process.returncode
        ran.stderr[name] = process.stderr
    return ran


def run_each(tasks: dict[str, Task], logs: Path) -> Ran:
    for task in tasks.values():
        run_task(task.rn)
    return Ran()


def drain_all(tasks: dict[str, Task], logs: Path) -> Ran:
    return Ran(drained=drain(QUEUES))


def eager(tasks: dict[str, Task], logs: Path) -> Ran:
    return Ran()  # they ran as they were submitted


@contextmanager
def eager_mode(settings: Any) -> Iterator[None]:
    with override_settings(SCYLLA={**settings.SCYLLA, "EAGER": True}):
        yield


Runner = Callable[[dict[str, Task], Path], Ran]
RUNNERS: dict[str, tuple[Runner, Callable[[Any], AbstractContextManager[None]]]] = {
    "worker": (thread_worker, lambda settings: nullcontext()),
    "worker --isolation process": (process_worker, lambda settings: nullcontext()),
    "scylla_run": (scylla_run, lambda settings: nullcontext()),
    "run_task": (run_each, lambda settings: nullcontext()),
    "drain": (drain_all, lambda settings: nullcontext()),
    "EAGER": (eager, eager_mode),
}


@pytest.fixture
def logs(settings, tmp_path) -> Path:
    """Task logs in a folder of the test's own, which the processes it starts use too."""
    settings.STORAGES = {
        **settings.STORAGES,
        "tasklogs": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path)},
        },
    }
    settings.SCYLLA = {**settings.SCYLLA, "TASK_LOG_STORAGE": "tasklogs"}
    return tmp_path


@pytest.mark.concurrency
@pytest.mark.parametrize("runner", list(RUNNERS))
def test_every_runner_leaves_the_same_in_the_database(runner, settings, logs):
    run, mode = RUNNERS[runner]
    with mode(settings):
        tasks = submit_table()
    ran = run(tasks, logs)
    pictures = {name: picture(task) for name, task in tasks.items()}
    differences = {
        name: {
            key: (value, TABLE[name].expected[key])
            for key, value in pictures[name].items()
            if value != TABLE[name].expected[key]
        }
        for name in TABLE
    }
    assert not {name: d for name, d in differences.items() if d}, (
        f"{runner} left (found, expected):\n"
        + "\n".join(f"  {name}: {d}" for name, d in differences.items() if d)
    )
    if ran.exit_codes:  # scylla_run exits 0 when its task completed, else 1
        expected = {
            name: 0 if row.expected["status"] == Status.COMPLETED else 1
            for name, row in TABLE.items()
        }
        assert ran.exit_codes == expected, ran.stderr
        for name, code in expected.items():  # and says why on stderr
            assert (f"CommandError: {tasks[name].rn} " in ran.stderr[name]) == bool(code)
    if ran.drained is not None:  # the tasks as they were left, in run order
        assert sorted(t.pk for t in ran.drained) == sorted(t.pk for t in tasks.values())
