"""A paused task beside a real worker process: every task around it runs, it is never leased,
and once resumed the worker runs it (woken by the resume on PostgreSQL, by its poll
elsewhere)."""

from __future__ import annotations

import signal

import pytest

from scylla_django.enums import Status
from scylla_django.models import Task
from tests.processes import finish, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]


def test_a_worker_never_leases_a_paused_task_until_it_is_released():
    paused = Task.objects.submit("i-echo", {"n": 0}, priority=9)
    paused.pause(by="alice")
    others = [Task.objects.submit("i-echo", {"n": n}) for n in range(1, 4)]
    process = start(
        "scylla_worker",
        "--queue=i-echo",
        "--handlers=tests.isolation_handlers",
        "--poll-interval=0.1",
        "-v",
        "2",
    )
    try:
        done = Task.objects.filter(pk__in=[t.pk for t in others], status=Status.COMPLETED)
        wait_until(lambda: done.count() == 3, what="the tasks around it")
        paused.refresh_from_db()
        assert (paused.status, paused.leases) == (Status.READY, 0)
        paused.resume()
        wait_until(lambda: Task.objects.get(pk=paused.pk).status == "completed", what="resumed")
    finally:
        process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output
    assert Task.objects.get(pk=paused.pk).result["echo"] == {"n": 0}
