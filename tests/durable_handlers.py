"""Handlers of the durable execution tests with real processes (`--handlers=...`)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from django.contrib.auth.models import User

from scylla_django import handler


@handler("d-steps")
def ten_steps(ctx):
    """Ten steps, each after `spec["work"]` seconds of work outside it, writing one row of the
    app's own table (a user named after the step and the task) in the step's transaction, then
    pausing there `spec["pause"]` seconds (a kill lands in either)."""
    for n in range(ctx.spec.get("steps", 10)):
        if f"s{n}" not in ctx.steps:
            time.sleep(ctx.spec.get("work", 0))
        with ctx.step(f"s{n}") as step:
            if not step.done:
                User.objects.create(
                    username=uuid.uuid4().hex, first_name=f"s{n}", last_name=ctx.task.rn
                )
                time.sleep(ctx.spec.get("pause", 0.1))
                step.result = n
    return ctx.steps


@handler("d-cursor")
def long_loop(ctx):
    """Rows `0..rows` from the cursor on, each appended to the file `spec["out"]` once it is
    processed (after `spec["pause"]` seconds), a checkpoint every `spec["every"]` rows, a stop
    check at each row."""
    every = ctx.spec["every"]
    pause = ctx.spec.get("pause", 0.001)
    out = Path(ctx.spec["out"])
    row = ctx.cursor or 0
    with out.open("a") as processed:  # written through when the loop ends, however it ends
        while row < ctx.spec["rows"]:
            ctx.check()
            if pause:
                time.sleep(pause)
            processed.write(f"{row}\n")
            row += 1
            if row % every == 0:
                ctx.checkpoint(row)
    return {"rows": row}


@handler("d-nap")
def nap(ctx):
    """A step, a durable sleep of half a second, another step."""
    first = ctx.step("first", lambda: "before the sleep")
    ctx.durable_sleep(0.5)
    return {"first": first, "second": ctx.step("second", lambda: "after"), "runs": ctx.task.leases}


@handler("d-approve")
def approve(ctx):
    """Waits for the signal `go`; returns its payload."""
    return {"go": ctx.wait_for(signal="go")}


@handler("d-group")
def grouped(ctx):
    """Waits for the event `wake.group` of its `spec["group"]` (up to `spec["timeout"]`, if
    any), then records that it resumed (a row of the app's own table, in a step): each run
    past the wait writes one such row at most."""
    payload = ctx.wait_for(
        "wake.group", match={"group": ctx.spec["group"]}, timeout=ctx.spec.get("timeout")
    )
    with ctx.step("resumed") as step:
        if not step.done:
            User.objects.create(
                username=uuid.uuid4().hex, first_name="resumed", last_name=ctx.task.rn
            )
            step.result = None if not payload else payload["by"]
    return {"by": step.result, "timed_out": not payload}
