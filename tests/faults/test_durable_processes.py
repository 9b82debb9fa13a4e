"""Durable execution with real worker processes: a task of ten steps whose worker is killed
(SIGKILL) at random points completes with each step's side effect committed exactly once; a
long loop stopped by SIGTERM resumes on another worker from its last checkpoint."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models.functions import Now

from scylla_django.enums import Status
from scylla_django.models import Step, Task, Wait
from tests.processes import descendants, finish, signal_each, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

HANDLERS = "--handlers=tests.durable_handlers"
#: Kills per run (SCYLLA_TEST_DURABLE_KILLS sets another number).
KILLS = int(os.environ.get("SCYLLA_TEST_DURABLE_KILLS") or 20)


def worker(queue: str, *extra: str):
    return start(
        "scylla_worker",
        f"--queue={queue}",
        "--lease-length=2s",
        "--heartbeat-interval=0.3",
        "--poll-interval=0.1",
        HANDLERS,
        *extra,
    )


def kill(process) -> None:
    signal_each([process.pid, *descendants(process.pid)], signal.SIGKILL)
    process.wait()


def reset_when_expired(task: Task) -> None:
    """What the monitor does once the dead worker's lease has run out (made to run out now)."""
    Task.objects.filter(pk=task.pk, status=Status.RUNNING).update(
        deadline=Now() - timedelta(seconds=1), updated=Now() - timedelta(seconds=2)
    )
    Task.objects.reset_expired()


def effects(task: Task) -> Counter[str]:
    return Counter(User.objects.filter(last_name=task.rn).values_list("first_name", flat=True))


@pytest.mark.slow  # a worker process started per kill: a second or two each
def test_ten_steps_killed_at_random_points_commit_each_effect_exactly_once():
    rng = random.Random(os.environ.get("SCYLLA_TEST_SEED", "durable"))
    # Each step takes half a second, the last tenth of it in its transaction (SQLite's one
    # write lock: a heartbeat waits that long), and each kill comes 0.05-0.6 s after the
    # lease: a run commits at most one more step, so every kill lands before the task is done.
    task = Task.objects.submit("d-steps", {"work": 0.45, "pause": 0.05}, rn="ten-steps")
    kills = 0
    while kills < KILLS:
        process = worker("d-steps")
        wait_until(
            lambda: Task.objects.filter(pk=task.pk).exclude(status=Status.READY).exists(),
            what="the task leased",
        )
        time.sleep(rng.uniform(0.05, 0.6))
        kill(process)
        assert Task.objects.get(pk=task.pk).status == Status.RUNNING, "done before the kill"
        kills += 1
        reset_when_expired(task)
        done = Step.objects.filter(task=task).count()
        assert all(count == 1 for count in effects(task).values()), effects(task)
        assert sum(effects(task).values()) == done
    code, output = finish(worker("d-steps", "--max-tasks=1"), timeout=120)
    assert code == 0, output
    finished = Task.objects.get(pk=task.pk)
    assert finished.status == Status.COMPLETED, output
    assert finished.result == {f"s{n}": n for n in range(10)}
    assert effects(task) == {f"s{n}": 1 for n in range(10)}
    assert finished.attempt == 1


def lines(path) -> int:
    """The lines of `path` so far (0 before it exists), counted without reading it whole."""
    if not path.exists():
        return 0
    with path.open("rb") as file:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 20), b""))


@pytest.mark.parametrize(
    ("rows", "every", "pause"),
    [
        (3000, 50, 0.001),
        pytest.param(
            1_000_000,
            10_000,
            0,
            id="a-million-rows",
            marks=[
                pytest.mark.slow,
                # Minutes of a shared machine: run on PostgreSQL and SQLite. The loop's
                # statements are MariaDB's too in the case above.
                pytest.mark.skipif(connection.vendor == "mysql", reason="PostgreSQL and SQLite"),
            ],
        ),
    ],
)
def test_sigterm_during_a_cursor_loop_resumes_from_the_last_checkpoint(
    tmp_path, rows, every, pause
):
    out = tmp_path / "rows.txt"
    spec = {"rows": rows, "every": every, "out": str(out), "pause": pause}
    task = Task.objects.submit("d-cursor", spec, rn="long-loop")
    first = worker("d-cursor")
    # Stopped a tenth of the way in, at least six checkpoints on.
    begun = max(rows // 10, 6 * every)
    wait_until(lambda: lines(out) > begun, timeout=120, what="rows processed")
    first.send_signal(signal.SIGTERM)
    code, output = finish(first)
    assert code == 0, output
    cursor = Step.objects.get(task=task, name="@cursor").result
    assert cursor % every == 0 and cursor >= begun - every
    reset_when_expired(task)  # the yielded lease, made ready as the monitor's next pass does
    second = worker("d-cursor", "--max-tasks=1")
    code, output = finish(second, timeout=max(120, rows // 2000))
    assert code == 0, output
    assert Task.objects.get(pk=task.pk).status == Status.COMPLETED
    seen = Counter(int(line) for line in out.read_bytes().split())
    assert len(seen) == rows and min(seen) == 0 and max(seen) == rows - 1
    twice = [row for row, count in seen.items() if count > 1]
    assert len(twice) <= every
    assert all(row >= cursor for row in twice)


def test_a_durable_sleep_in_a_child_process_parks_the_task_and_resumes_it():
    task = Task.objects.submit("d-nap", {}, rn="nap")
    process = worker("d-nap", "--isolation", "process")
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.COMPLETED, what="completed")
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output
    done = Task.objects.get(pk=task.pk)
    assert done.result == {"first": "before the sleep", "second": "after", "runs": 2}
    assert (done.snoozes, done.attempt) == (1, 1)
    assert Wait.objects.get(task=task).outcome == "woken"
