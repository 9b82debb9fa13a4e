"""`manage.py scylla_tasks eta`: when a ready task is expected to start, the rules played
forward, and the bottleneck (`Task.forecast`), with `--what-if` changes for the forecast only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import OutputWrapper

from ...durations import short
from ...models import Task
from ...models.forecast import Forecast, WhatIf
from ...text import plural
from .formats import when


def forecast_line(forecast: Forecast, now: datetime) -> str:
    """A forecast in one line: when, and the rule that decides it."""
    if forecast.starts_at is None:
        return f"unknown: {forecast.detail}"
    if not forecast.wait:
        return "may start now"
    return f"{when(forecast.starts_at, now)}: {forecast.detail}"


def eta(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Write the forecast of the task `options["rn"]`, rule by rule."""
    task = Task.objects.get_by_rn(options["rn"])
    what_if = WhatIf.parse(dict(options["what_if"]))
    forecast = task.forecast(what_if)
    if what_if:
        given = ", ".join(f"{k}={v}" for k, v in what_if.as_json().items())
        out.write(f"what if {given}:")
    out.write(f"{task.rn}: {forecast_line(forecast, forecast.now)}")
    if forecast.run_time is not None:
        measured = f"measured on {plural(forecast.samples, 'task')}" if forecast.samples else ""
        out.write(f"  run time {short(forecast.run_time)} {measured}".rstrip())
    for rule in forecast.rules:
        mark = "*" if rule == forecast.bottleneck else " "
        out.write(f"  {mark} {rule.detail}")
