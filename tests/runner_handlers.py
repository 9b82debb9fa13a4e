"""The handlers of tests/runtime/test_runners.py: one behaviour each, run through every way of
running a task (imported in-process, or with --handlers by the command subprocesses and the
children of `--isolation process`).

Each logs one line through `ctx.logger`; what they submit goes to `SINK`, a queue no process
serves, and a callback to `CALLBACK`, never released: every runner runs exactly the tasks the
test submitted.
"""

from __future__ import annotations

import time
from datetime import timedelta

from scylla_django import Abort, handler

SINK = "r-sink"
CALLBACK = "r-callback"


@handler("r-complete")
def complete(ctx):
    """Write a row of the project's own in a fenced block, return a result."""
    from django.contrib.auth.models import User

    ctx.logger.info("complete ran")
    with ctx.fenced():
        User.objects.create(username=f"fenced-{ctx.task.rn}")
    return {"got": ctx.spec}


@handler("r-abort")
def abort(ctx):
    ctx.logger.info("abort ran")
    raise Abort("refused", "the handler refused", args={"n": ctx.spec["n"]})


@handler("r-raise")
def raise_(ctx):
    """Raise: the task is aborted, and retried by its policy."""
    ctx.logger.info("raise ran")
    raise ValueError(f"bad input {ctx.spec['n']}")


@handler("r-snooze")
def snooze(ctx):
    ctx.logger.info("snooze ran")
    ctx.snooze(timedelta(minutes=5))


@handler("r-spawn")
def spawn(ctx):
    """Spawn two children, submitted with this task's completion."""
    ctx.logger.info("spawn ran")
    for n in range(2):
        ctx.spawn(SINK, {"child": n})
    return {"spawned": 2}


@handler("r-fan-out")
def fan_out(ctx):
    """Open a batch of two tasks with an on_success callback."""
    ctx.logger.info("fan-out ran")
    with ctx.batch(on_success=(CALLBACK, {"callback": True})) as batch:
        for n in range(2):
            batch.submit(SINK, {"member": n})
    return {"members": 2}


@handler(CALLBACK)
def callback(ctx):
    """A batch's callback (a callback's queue must be served)."""
    return "called back"


@handler("r-bundled", bundle_size=5)
def batched(batch):
    """A bundle handler: each member completes with its own result."""
    for ctx in batch:
        ctx.logger.info("batched ran")
    return {ctx.task.rn: {"member": ctx.spec["n"]} for ctx in batch}


@handler("r-timed", timeout=1)
def timed(ctx):
    """Check for a stop while working for longer than its one-second run-time limit."""
    ctx.logger.info("timed ran")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ctx.check()
        time.sleep(0.05)
    return "finished"
