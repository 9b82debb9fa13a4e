"""Handlers for benchmarks/concurrent_tasks.py, loaded by its workers with
`scylla_worker --handlers concurrent_tasks_handlers` (benchmarks/ is on their PYTHONPATH).

- `bench-hold`: an `async def` handler that holds its task for spec["seconds"], waking every
  spec["step"] seconds to report progress (sent with the next heartbeat); it waits in
  `ctx.sleep()`, which a stop ends at once. When stopped it appends "<rn> <time>" to
  spec["path"] (cancel -> handler stopped) and raises as usual.
- `bench-start` (from throughput_handlers): returns the wall-clock time it started.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from throughput_handlers import start  # noqa: F401 (registers bench-start)

from scylla_django import handler
from scylla_django.exceptions import TaskCancelled

HOLD = "bench-hold"


@handler(HOLD)
async def hold(ctx: Any) -> str:
    loop = asyncio.get_running_loop()
    seconds, step = ctx.spec["seconds"], ctx.spec["step"]
    until = loop.time() + seconds
    try:
        while (left := until - loop.time()) > 0:
            await ctx.sleep(min(step, left))
            ctx.set_progress(min(1.0, 1 - (until - loop.time()) / seconds))
    except TaskCancelled:
        line = f"{ctx.task.rn} {time.time()}\n".encode()
        fd = os.open(ctx.spec["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one short write in append mode: lines never interleave
        finally:
            os.close(fd)
        raise
    return "held"
