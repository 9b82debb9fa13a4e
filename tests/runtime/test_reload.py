"""`scylla_worker --reload` as a real process: a code change yields the running task and a new
worker takes over; SIGTERM stops it gracefully."""

from __future__ import annotations

import os
import signal
import textwrap

import pytest

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task, Worker
from tests.processes import child_env, finish, output_so_far, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

HANDLERS = textwrap.dedent(
    """
    import time

    from scylla_django import handler


    @handler("t-reload")
    def work(ctx):
        for _ in range(1200):
            ctx.check()
            time.sleep(0.05)
        return {"version": VERSION}


    VERSION = 1
    """
)


def test_a_code_change_yields_the_task_and_restarts_the_worker(tmp_path):
    module = tmp_path / "reload_handlers.py"
    module.write_text(HANDLERS)
    Task.objects.submit("t-reload", {}, rn="r")
    # start(): the output goes to a file that a timed-out wait shows, and the supervisor and
    # its child are killed after a test that fails before its finish().
    process = start(
        "scylla_worker",
        "--reload",
        "--queue=t-reload",
        "--handlers=reload_handlers",
        "--heartbeat-interval=0.3",
        "--poll-interval=0.1",
        "--lease-length=5s",
        "--grace-period=5",
        "-v",
        "2",
        env={"PYTHONPATH": os.pathsep.join([str(tmp_path), child_env()["PYTHONPATH"]])},
    )
    wait_until(lambda: Task.objects.filter(status=Status.RUNNING).exists(), what="a lease")
    first = Worker.objects.get_by_name(Task.objects.get(rn="r").owner)
    # The reloader notes the files' times once a second, and a change before its first look
    # goes unseen: the file's time moves on at each poll until the worker has seen it.
    wait_until(lambda: "watching for code changes" in output_so_far(process), what="the reloader")
    module.write_text(HANDLERS.replace("VERSION = 1", "VERSION = 2"))

    def seen() -> bool:
        if "changed: yielding" in output_so_far(process):
            return True
        os.utime(module)
        return False

    wait_until(seen, what="the change seen")
    # The old child yields and exits, and the supervisor starts a new one, which sets Django
    # up again before it registers: on a busy machine, tens of seconds (the default wait).
    wait_until(lambda: Worker.objects.filter(pk__gt=first.pk).exists(), what="a new worker")
    first.refresh_from_db()
    assert first.stopped is not None
    history = list(History.objects.filter(task__rn="r").values_list("typ", "worker"))
    assert history == [(EventType.ASSIGNMENT, first.name), (EventType.YIELD, first.name)]
    second = Worker.objects.get(pk__gt=first.pk)
    assert second.pid != first.pid and second.stopped is None
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0, output
    assert "changed: yielding the running tasks before restarting" in output
    second.refresh_from_db()
    assert second.stopped is not None
