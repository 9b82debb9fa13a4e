"""`scylla_worker --reload` as a real process: a code change yields the running task and a new
worker takes over; SIGTERM stops it gracefully."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task, Worker
from tests.processes import ROOT, child_env, wait_until

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
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "manage.py"),
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
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        wait_until(lambda: Task.objects.filter(status=Status.RUNNING).exists(), what="a lease")
        first = Worker.objects.get_by_name(Task.objects.get(rn="r").owner)
        # The reloader notes the files' times once a second, and a change before its first
        # look goes unseen: the file's time moves on at each poll until the worker has seen it.
        wait_until(lambda: any("watching for code changes" in x for x in lines), timeout=20)
        module.write_text(HANDLERS.replace("VERSION = 1", "VERSION = 2"))

        def seen() -> bool:
            if any("changed: yielding" in x for x in lines):
                return True
            os.utime(module)
            return False

        wait_until(seen, what="the change seen")
        wait_until(
            lambda: Worker.objects.filter(pk__gt=first.pk).exists(),
            timeout=30,
            what="a new worker",
        )
        first.refresh_from_db()
        assert first.stopped is not None
        history = list(History.objects.filter(task__rn="r").values_list("typ", "worker"))
        assert history == [(EventType.ASSIGNMENT, first.name), (EventType.YIELD, first.name)]
        second = Worker.objects.get(pk__gt=first.pk)
        assert second.pid != first.pid and second.stopped is None
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    finally:
        process.kill()
        reader.join(timeout=5)
    output = "".join(lines)
    assert code == 0, output
    assert "changed: yielding the running tasks before restarting" in output
    second.refresh_from_db()
    assert second.stopped is not None
