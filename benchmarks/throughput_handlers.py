"""Handlers for benchmarks/throughput.py, loaded by its workers with
`scylla_worker --handlers throughput_handlers` (benchmarks/ is on their PYTHONPATH).

- `bench-noop`: does nothing (throughput).
- `bench-start`: returns the wall-clock time it started (submit -> start latency).
- `bench-cancel`: appends "started <time>" to spec["path"], then calls `ctx.check()` in a tight
  loop; when it raises, appends "stopped <time>" (cancel -> stop latency). It gives up after
  spec["limit"] seconds.
- `noop_task`: a `django.tasks` task that does nothing (Django 6+).
"""

from __future__ import annotations

import time
from typing import Any

from scylla_django import handler

NOOP = "bench-noop"
START = "bench-start"
CANCEL = "bench-cancel"


@handler(NOOP)
def noop(ctx: Any) -> None:
    return None


@handler(START)
def start(ctx: Any) -> dict[str, float]:
    return {"started": time.time()}


@handler(CANCEL)
def cancel(ctx: Any) -> None:
    path = ctx.spec["path"]
    with open(path, "a") as out:
        out.write(f"started {time.time()!r}\n")
    give_up = time.monotonic() + ctx.spec.get("limit", 30)
    while time.monotonic() < give_up:
        try:
            ctx.check()
        except Exception:
            stopped = time.time()
            with open(path, "a") as out:
                out.write(f"stopped {stopped!r}\n")
            raise
        time.sleep(0.001)


try:
    from django.tasks import task
except ImportError:  # Django < 6: no django.tasks
    pass
else:

    @task
    def noop_task() -> None:
        return None
