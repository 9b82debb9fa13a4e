"""A held task beside a real worker process: every task around it runs, it is never leased,
and once released the worker runs it (woken by the release on PostgreSQL, by its poll
elsewhere)."""

from __future__ import annotations

import signal

import pytest

from scylla_django.enums import Status
from scylla_django.models import Task
from tests.processes import finish, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]


def test_a_worker_never_leases_a_held_task_until_it_is_released():
    held = Task.objects.submit("i-echo", {"n": 0}, priority=9)
    held.hold(by="alice")
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
        held.refresh_from_db()
        assert (held.status, held.leases) == (Status.READY, 0)
        held.release_hold()
        wait_until(lambda: Task.objects.get(pk=held.pk).status == Status.COMPLETED, what="released")
    finally:
        process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output
    assert Task.objects.get(pk=held.pk).result["echo"] == {"n": 0}
