"""Handlers of benchmarks/durable.py's scale run, loaded by its workers with
`scylla_worker --handlers durable_handlers` (benchmarks/ is on their PYTHONPATH)."""

from __future__ import annotations

from typing import Any

from scylla_django import handler

RUN = "bench-durable-run"


@handler(RUN)
def run(ctx: Any) -> None:
    """A running task of the scale run: a step, then done."""
    ctx.step("work", lambda: ctx.spec.get("n"))
