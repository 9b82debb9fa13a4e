"""Handlers used by the worker tests (imported in-process, or with --handlers by subprocesses)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from datetime import timedelta

from scylla_django import Abort, Snooze, handler
from scylla_django.exceptions import LeaseLost, TaskCancelled


@handler("t-echo")
def echo(ctx):
    return {"echo": ctx.spec}


@handler("t-sleep")
def sleep(ctx):
    """Work for spec["seconds"] in small steps, reporting progress and checking for a stop;
    with spec["until"], a path, until that file exists instead (a test's release)."""
    if "until" in ctx.spec:
        while not os.path.exists(ctx.spec["until"]):
            ctx.check()
            time.sleep(0.05)
        return {"slept": "until released"}
    steps = max(1, int(ctx.spec.get("seconds", 1) / 0.05))
    for step in range(steps):
        ctx.check()
        time.sleep(0.05)
        ctx.set_progress((step + 1) / steps)
    return {"slept": ctx.spec.get("seconds", 1)}


@handler("t-fail")
def fail(ctx):
    raise ValueError(f"bad input {ctx.spec!r}")


@handler("t-abort")
def abort(ctx):
    raise Abort("empty", "no rows matched", args={"day": ctx.spec.get("day")})


@handler("t-kill")
def kill(ctx):
    """Kill the whole worker process, as an out-of-memory kill would."""
    os.kill(os.getpid(), signal.SIGKILL)


@handler("t-poison")
def poison(ctx):
    """Append the task's rn to the file spec["path"] as its handler starts; a poison pill
    (spec["poison"]) then kills its whole worker process, as an out-of-memory kill would."""
    line = f"{ctx.task.rn} {ctx.task.leases}\n".encode()
    out = os.open(ctx.spec["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(out, line)  # in the file before the kill: a write of its own, unbuffered
    finally:
        os.close(out)
    if ctx.spec.get("poison"):
        os.kill(os.getpid(), signal.SIGKILL)


@handler("t-record")
def record(ctx):
    """Append "rn worker" to the file spec["path"], then sleep spec["sleep"] seconds."""
    with open(ctx.spec["path"], "a") as out:
        out.write(f"{ctx.task.rn} {ctx.worker.name}\n")
    time.sleep(ctx.spec.get("sleep", 0))
    return None


@handler("t-bad-result")
def bad_result(ctx):
    return {"not json": {1, 2}}


@handler("t-stubborn")
def stubborn(ctx):
    """Sleep without ever checking for a stop (having made the file `started` names, if any),
    `seconds` long, or until the file `until` names exists (at most `seconds`)."""
    if "started" in ctx.spec:
        open(ctx.spec["started"], "w").close()
    seconds = ctx.spec.get("seconds", 60)
    if "until" not in ctx.spec:
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while not os.path.exists(ctx.spec["until"]) and time.monotonic() < deadline:
        time.sleep(0.02)


@handler("t-exit")
def exit_(ctx):
    """End with SystemExit, as sys.exit() in library code would."""
    raise SystemExit(f"exit from {ctx.task.rn}")


@handler("t-interrupt")
def interrupt(ctx):
    raise KeyboardInterrupt


@handler("t-async")
async def async_sleep(ctx):
    """Await spec["seconds"] in small steps, checking for a stop; report the thread it ran on."""
    import asyncio
    import threading

    steps = max(1, int(ctx.spec.get("seconds", 0.3) / 0.02))
    for step in range(steps):
        ctx.check()
        await asyncio.sleep(0.02)
        ctx.set_progress((step + 1) / steps)
    return {"thread": threading.get_ident()}


@handler("t-spin")
def spin(ctx):
    """Loop for ever without checking for a stop (as a hung handler would)."""
    while True:
        sum(range(1000))


@handler("t-timed", timeout=0.5)
def timed(ctx):
    """Sleep in steps, checking for a stop, for longer than its handler's timeout."""
    for _ in range(200):
        ctx.check()
        time.sleep(0.05)
    return "finished"


@handler("t-late")
def late(ctx):
    """Catch the stop and return a result anyway (after spec["extra"] seconds)."""
    from scylla_django.exceptions import TaskTimedOut

    try:
        while True:
            ctx.check()
            time.sleep(0.05)
    except TaskTimedOut:
        time.sleep(ctx.spec.get("extra", 0))
        return "done anyway"


@handler("t-steps")
def steps(ctx):
    """Append "rn step time" to spec["path"] every 0.1 s for spec["seconds"], checking first."""
    deadline = time.time() + ctx.spec.get("seconds", 60)
    step = 0
    while time.time() < deadline:
        ctx.check()
        with open(ctx.spec["path"], "a") as out:
            out.write(f"{ctx.task.rn} {step} {time.time()}\n")
        step += 1
        time.sleep(0.1)
    return step


@handler("t-user")
def user(ctx):
    """Create the user spec["name"] in a fenced block, report progress, return its pk."""
    from django.contrib.auth.models import User

    ctx.set_progress(0.5)
    with ctx.fenced():
        created = User.objects.create(username=ctx.spec["name"])
    return {"user": created.pk}


@handler("t-chain")
def chain(ctx):
    """Submit the next link (spec["n"] - 1) until 0: tasks that submit tasks."""
    from scylla_django.models import Task

    n = ctx.spec["n"]
    if n > 0:
        Task.objects.submit("t-chain", {"n": n - 1})
    return n


@handler("t-async-hang")
async def async_hang(ctx):
    """Await for a minute without checking for a stop."""
    import asyncio

    await asyncio.sleep(60)


@handler("t-snooze")
def snooze(ctx):
    """Snooze (by raising, or through the context) until the task has snoozed spec["times"]
    times, then return how many."""
    if ctx.task.snoozes < ctx.spec.get("times", 1):
        if ctx.spec.get("raise"):
            raise Snooze(ctx.spec.get("delay", 0.01))
        ctx.snooze(ctx.spec.get("delay", 0.01))
    return {"snoozes": ctx.task.snoozes}


@handler("t-spawn")
def spawn(ctx):
    """Spawn spec["children"] children on t-echo (one with now=True if spec["now"]), then fail
    if spec["fail"], or snooze (the first time) if spec["snooze"]."""
    rns = [ctx.spawn("t-echo", {"n": n}) for n in range(ctx.spec.get("children", 0))]
    if ctx.spec.get("now"):
        rns.append(ctx.spawn("t-echo", {"now": True}, now=True))
    if ctx.spec.get("fail"):
        raise Abort("failed", "the parent failed after spawning")
    if ctx.spec.get("snooze") and not ctx.task.snoozes:
        ctx.snooze(60)
    return {"children": rns}


@handler("t-fan-out")
def fan_out(ctx):
    """Open a batch of spec["tasks"] t-echo tasks with an on_success callback on t-echo (and
    one more batch dropped by an exception in its block), then fail if spec["fail"]."""
    with ctx.batch(on_success=("t-echo", {"callback": True})) as batch:
        rns = [batch.submit("t-echo", {"n": n}) for n in range(ctx.spec["tasks"])]
    try:
        with ctx.batch(on_complete=("t-echo", {"dropped": True})) as dropped:
            dropped.submit("t-echo", {"dropped": True})
            raise RuntimeError("leave the block")
    except RuntimeError:
        pass
    if ctx.spec.get("fail"):
        raise Abort("failed", "the parent failed after opening a batch")
    return {"tasks": rns}


@handler("t-sum")
def sum_parents(ctx):
    """The sum of the parents' results (each a number)."""
    return {"sum": sum(ctx.parent_results.values()), "parents": sorted(ctx.parent_results)}


# -- bundle handlers (docs/howto/bundle-handlers.md) ------------------------------------------


@handler("t-bundle-fill", bundle_size=3, bundle_wait=timedelta(minutes=10))
def fill(bundle):
    """Each member's bundle: its size and the call's id."""
    call = uuid.uuid4().hex
    return {ctx.task.rn: {"size": len(bundle), "call": call} for ctx in bundle}


@handler("t-bundle", bundle_size=5, bundle_wait=timedelta(seconds=1))
def batch(batch):
    """Decide each member by its spec: abort "fail", complete "done" with its own result; the
    rest complete with the returned mapping (or None when it names them not)."""
    call = uuid.uuid4().hex
    for ctx in batch:
        if ctx.spec.get("fail"):
            ctx.abort(Abort("bad", "a member that fails"))
        elif ctx.spec.get("done"):
            ctx.complete({"done": True, "size": len(batch), "call": call})
    return {ctx.task.rn: {"size": len(batch), "call": call, "pid": os.getpid()} for ctx in batch}


@handler("t-bundle-raise", bundle_size=10)
def batch_raise(batch):
    """Complete the first member, then raise: the others are aborted."""
    batch[0].complete("first")
    raise RuntimeError("the batch broke")


@handler("t-bundle-slow", bundle_size=10, bundle_wait=0.3)
def batch_slow(batch):
    """Work on each member for spec["seconds"] in steps, checking each member; a stopped member
    (cancelled, lease lost) is left alone, the others go on."""
    live = list(batch)
    deadline = time.monotonic() + max(ctx.spec.get("seconds", 1) for ctx in batch)
    while time.monotonic() < deadline and live:
        for ctx in list(live):
            try:
                ctx.check()
            except (TaskCancelled, LeaseLost):
                live.remove(ctx)
                continue
            ctx.set_progress(min(0.99, ctx.progress + 0.01))
        time.sleep(0.05)
    return {ctx.task.rn: "worked" for ctx in live}


@handler("t-bundle-async", bundle_size=4)
async def batch_async(batch):
    """An `async def` bundle handler: each member's result is its spec."""
    await asyncio.sleep(0.01)
    return {ctx.task.rn: {"spec": ctx.spec, "size": len(batch)} for ctx in batch}


@handler("t-hold")
async def hold(ctx):
    """Hold the task for spec["seconds"], awaiting spec["step"] (0.2 s) at a time and checking
    for a stop between steps, without a thread of its own; with spec["wake"], in
    `ctx.sleep()`, which a stop ends at once; with spec["until"], a path, until that file
    exists instead (a test's release)."""
    import asyncio

    step = ctx.spec.get("step", 0.2)
    loop = asyncio.get_running_loop()
    if "until" in ctx.spec:
        while not os.path.exists(ctx.spec["until"]):
            ctx.check()
            await asyncio.sleep(step)
        return "held"
    until = loop.time() + ctx.spec.get("seconds", 1)
    while loop.time() < until:
        if ctx.spec.get("wake"):
            await ctx.sleep(min(step, until - loop.time()))
        else:
            ctx.check()
            await asyncio.sleep(step)
    return "held"
