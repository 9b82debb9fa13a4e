"""Handlers of the process isolation and resources tests (imported with --handlers by the
worker subprocesses, and again by their child processes)."""

from __future__ import annotations

import ctypes
import os
import signal
import time

from scylla_django import Exponential, Snooze, handler

LEAKED: list[bytearray] = []


@handler("i-echo")
def echo(ctx):
    """Report progress, return the spec and the pid of the process that ran the handler."""
    ctx.set_progress(0.5)
    return {"echo": ctx.spec, "pid": os.getpid()}


@handler("i-segfault")
def segfault(ctx):
    """Dereference a null pointer: SIGSEGV."""
    ctypes.string_at(0)


@handler("i-exit")
def exit_at_once(ctx):
    """Leave the process without cleaning up, as a C library calling exit() would."""
    os._exit(3)


@handler("i-oom")
def killed(ctx):
    """SIGKILL this process, as the kernel's out-of-memory killer would."""
    os.kill(os.getpid(), signal.SIGKILL)


@handler("i-busy")
def busy(ctx):
    """Spin until this thread has used spec["seconds"] of CPU (however busy the machine is)."""
    end = time.thread_time() + ctx.spec["seconds"]
    count = 0
    while time.thread_time() < end:
        count += 1
    return {"count": count}


@handler("i-allocate")
def allocate(ctx):
    """Hold spec["mb"] megabytes (touched, so resident) for a moment, then free them."""
    block = bytearray(os.urandom(1024)) * (ctx.spec["mb"] * 1024)
    time.sleep(0.05)
    return {"held": len(block)}


@handler("i-leak")
def leak(ctx):
    """Keep spec["mb"] more megabytes for the life of the process."""
    LEAKED.append(bytearray(os.urandom(1024)) * (ctx.spec["mb"] * 1024))
    return {"pid": os.getpid(), "leaked": len(LEAKED)}


@handler("i-hang")
def hang(ctx):
    """Run on forever without looking at ctx.check(), as a hung C extension would."""
    while True:
        time.sleep(0.05)


# A handler a child cannot find by name (a lambda): it takes it from its own registry, once it
# has imported this module again.
handler("i-lambda")(lambda ctx: {"pid": os.getpid()})


@handler("i-snooze", snooze=Exponential(initial=5, base=3, cap=100))
def snooze_by_policy(ctx):
    """Snooze without a delay (in the child, under isolation): the worker's policy says how
    long, by the task's snooze count."""
    raise Snooze()


@handler("i-spin", cpu_limit=1)
def spin(ctx):
    """Spin on the CPU for ever: past its CPU limit of a second, the kernel stops its child."""
    while True:
        pass
