"""Handlers of the many-hosts test (tests/ha/test_many_hosts.py), loaded with --handlers.

Each run appends "start <rn> <host> <worker>" to spec["path"], works for spec["seconds"] without
checking for a stop (a host cut off from the database runs on), and, with spec["fenced"],
records its effect in a fenced block, one row per run (a Group named after the run, so that no
unique constraint would hide a second one); "done …" follows a committed effect.
"""

from __future__ import annotations

import os
import time

from scylla_django import handler


def _log(path: str, line: str) -> None:
    with open(path, "a") as out:  # one short write in append mode: lines never interleave
        out.write(line + "\n")


@handler("h-work")
def work(ctx):
    from django.contrib.auth.models import Group

    host = os.environ.get("SCYLLA_TEST_HOST", "?")
    run = f"{ctx.task.rn} {host} {ctx.worker.name}"
    _log(ctx.spec["path"], f"start {run}")
    time.sleep(ctx.spec["seconds"])
    if ctx.spec.get("fenced"):
        with ctx.fenced():
            Group.objects.create(name=run)
        _log(ctx.spec["path"], f"done {run}")
    return {"host": host, "worker": ctx.worker.name}
