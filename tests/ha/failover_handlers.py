"""Handlers of the failover test (tests/ha/test_failover.py), loaded with --handlers.

Each run appends "start|end <rn> <worker> <lease> <time>" to spec["path"] around
spec["seconds"] of work, so that the test can tell whether two workers ever held a task at once.
"""

from __future__ import annotations

import time

from scylla_django import handler


def _log(path: str, kind: str, ctx) -> None:
    with open(path, "a") as out:  # one short write in append mode: lines never interleave
        out.write(f"{kind} {ctx.task.rn} {ctx.worker.name} {ctx.task.leases} {time.time()}\n")


@handler("f-work")
def work(ctx):
    _log(ctx.spec["path"], "start", ctx)
    time.sleep(ctx.spec["seconds"])
    _log(ctx.spec["path"], "end", ctx)
    return ctx.task.rn
