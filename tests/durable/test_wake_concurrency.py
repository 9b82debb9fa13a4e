"""Concurrent emitters and signal senders wake each waiting task exactly once: the wake is a
conditional write on the wait (`outcome` null → woken) after the task's row is locked."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from scylla_django import emit
from scylla_django.exceptions import SignalAlreadySent
from scylla_django.handlers import HandlerRegistry, TaskContext, handler
from scylla_django.models import Task, Wait
from scylla_django.testing import run_task

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.concurrency,
    pytest.mark.skipif(connection.vendor == "sqlite", reason="one writer at a time on SQLite"),
]

TASKS = 20
THREADS = 4


def parked(queue: str, registry: HandlerRegistry, **wait: object) -> list[Task]:
    @handler(queue, registry=registry)
    def waiter(ctx: TaskContext) -> object:
        return ctx.wait_for(**{k: v(ctx) if callable(v) else v for k, v in wait.items()})

    tasks = [Task.objects.submit(queue, {"n": n}) for n in range(TASKS)]
    for task in tasks:
        run_task(task.rn, registry=registry)
    assert Wait.objects.filter(outcome__isnull=True).count() == TASKS
    return tasks


def together(work) -> list[object]:
    """Run `work(i)` on THREADS threads at once; what each returned or raised."""
    start = threading.Barrier(THREADS)
    results: list[object] = [None] * THREADS

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    return results


def test_concurrent_emitters_wake_each_waiting_task_once():
    registry = HandlerRegistry()
    tasks = parked("wc-event", registry, kind="go", match=lambda ctx: {"n": ctx.spec["n"]})

    def emitter(i: int) -> None:
        for n in range(TASKS):
            emit("go", {"n": n, "by": i})

    assert together(emitter) == [None] * THREADS
    waits = list(Wait.objects.all())
    assert [w.outcome for w in waits] == ["woken"] * TASKS
    assert len({w.event for w in waits}) == TASKS
    for task in tasks:
        done = run_task(task.rn, registry=registry)
        assert done.status == "completed" and done.result["n"] == done.spec["n"]


def test_a_signal_sent_by_several_senders_at_once_is_delivered_once():
    registry = HandlerRegistry()
    tasks = parked("wc-signal", registry, signal="go")

    def sender(i: int) -> int:
        sent = 0
        for task in tasks:
            try:
                task.signal("go", {"by": i})
                sent += 1
            except SignalAlreadySent:
                pass
        return sent

    assert sum(together(sender)) == TASKS
    assert [w.outcome for w in Wait.objects.all()] == ["woken"] * TASKS
