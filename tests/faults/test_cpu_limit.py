"""`@handler(cpu_limit=...)` under `--isolation process`: a handler that spins past its CPU
time is stopped by the kernel (RLIMIT_CPU, SIGXCPU in its child process) and its task aborted
with the code `cpu_limit`; the worker goes on with a new child."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scylla_django import handler
from scylla_django.enums import Status
from scylla_django.handlers import HandlerRegistry
from scylla_django.models import Task
from tests.processes import finish, start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]


def test_a_task_past_its_cpu_limit_is_aborted_and_the_worker_goes_on():
    spinning = Task.objects.submit("i-spin", {}, priority=9)
    after = Task.objects.submit("i-echo", {"n": 1})
    process = start(
        "scylla_worker",
        "--queue=i-spin",
        "--queue=i-echo",
        "--isolation=process",
        "--lease-length=60s",  # not about leases: none is to be given up on a loaded machine
        "--handlers=tests.isolation_handlers",
        "--poll-interval=0.1",
        "--max-tasks=2",
        "-v",
        "2",
    )
    code, output = finish(process, timeout=120)
    assert code == 0, output
    spinning.refresh_from_db()
    assert spinning.status == Status.ABORTED, output
    [error] = spinning.errors
    assert error["code"] == "cpu_limit"
    assert error["args"] == {"cpu_limit": 1.0}
    assert spinning.cpu_time is None or spinning.cpu_time >= 1.0
    after.refresh_from_db()
    assert after.status == Status.COMPLETED
    assert after.result["pid"] != process.pid
    assert "used its CPU limit of 1s" in output


def test_a_cpu_limit_must_be_positive():
    with pytest.raises(ValidationError):
        handler("x-spin", registry=HandlerRegistry(), cpu_limit=0)(lambda ctx: None)
