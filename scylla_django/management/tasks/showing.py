"""`manage.py scylla_tasks show`: one task, its fields, why it waits and when it starts, its
spec, result and errors, its history, its durable records (steps, cursor, waits, signals) and,
with `--log`, its log."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import OutputWrapper

from ... import logs
from ...db import read_clock
from ...durations import short
from ...enums import Status
from ...models import Task, TaskOrigin
from ...models.waits import durable_record
from ...text import plural
from ..terminal import percent, plain_table
from .forecasting import forecast_line
from .formats import when

HISTORY_SHOWN = 50


def show(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Write the task `options["rn"]`."""
    task = Task.objects.get_by_rn(options["rn"])
    now = read_clock(Task.objects.db)
    fields: list[tuple[str, str]] = [
        ("rn", task.rn),
        ("queue", task.queue),
        ("status", task.status),
        ("progress", percent(task.progress)),
        ("priority", str(task.priority)),
        ("attempt", str(task.attempt)),
        ("root", task.root or ""),
        ("retry of", task.retry_of or ""),
        ("owner", task.owner or ""),
        ("lease", str(task.leases)),
        ("lease length", short(task.lease_length) if task.lease_length else ""),
        ("deadline", when(task.deadline, now)),
        ("not before", when(task.not_before, now)),
        ("created", when(task.created, now)),
        ("updated", when(task.updated, now)),
        ("unique key", task.unique_key or ""),
        ("submitted by", submitted_by(task)),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        if value:
            out.write(f"{name:<{width}}  {value}")
    for reason in task.waiting_reasons():
        out.write(f"{'waits':<{width}}  {reason['detail']}")
    if task.status == Status.READY:
        out.write(f"{'starts':<{width}}  {forecast_line(task.forecast(), now)}")
    write_json(out, "spec", task.spec)
    if task.result is not None:
        write_json(out, "result", task.result)
    if task.errors:
        out.write("errors:")
        for error in task.errors:
            line = f"  {error.get('code', '?')}"
            if error.get("description"):
                line += f": {error['description']}"
            out.write(line)
    entries = list(task.history.order_by("-id")[:HISTORY_SHOWN])
    out.write("history:" if entries else "history: none")
    rows = [
        (
            when(entry.time, now),
            entry.typ,
            entry.worker or "",
            "" if entry.progress is None else percent(entry.progress),
        )
        for entry in reversed(entries)
    ]
    for line in plain_table(("time", "event", "worker", "progress"), rows):
        out.write(f"  {line}")
    show_durable(out, task, now)
    if options["log"]:
        text = task.read_log()
        if text is None:
            why = logs.not_kept() or "no run of this task logged anything"
            out.write(f"log: none ({why})")
        else:
            out.write("log:")
            out.write(text, ending="" if text.endswith("\n") else "\n")


def submitted_by(task: Task) -> str:
    """Who submitted `task`, in words: "ann (token 1f2e…)", "nightly import", "system"."""
    origin = TaskOrigin.objects.filter(task=task).select_related("user").first()
    if origin is None:
        return "system"
    who = origin.name or (origin.user.get_username() if origin.user else origin.kind)
    if origin.token:
        who += f" (token {origin.token[:8]}…)"
    if origin.admission_key:
        who += f", admission key {origin.admission_key}"
    return who + (f": {origin.description}" if origin.description else "")


def show_durable(out: OutputWrapper, task: Task, now: datetime) -> None:
    """The task's steps, cursor, waits and signals (docs/howto/durable.md), if any."""
    record = durable_record(task)
    if record["steps"]:
        out.write("steps:")
        rows = [
            (s.name, plural(s.size, "byte"), when(s.time, now), str(s.lease))
            for s in record["steps"]
        ]
        for line in plain_table(("name", "result", "time", "lease"), rows):
            out.write(f"  {line}")
    if record["cursor"] is not None:
        write_json(out, "cursor", record["cursor"])
    if record["waits"]:
        out.write("waits:")
        waits = [
            (w.name, w.describe(), when(w.started, now), w.outcome or "waiting", str(w.lease))
            for w in record["waits"]
        ]
        for line in plain_table(("name", "waits for", "started", "outcome", "lease"), waits):
            out.write(f"  {line}")
    if record["signals"]:
        out.write("signals:")
        signals = [(g.name, when(g.time, now)) for g in record["signals"]]
        for line in plain_table(("name", "received"), signals):
            out.write(f"  {line}")


def write_json(out: OutputWrapper, name: str, value: Any) -> None:
    """`name:` and `value` as indented JSON below it."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    out.write(f"{name}:")
    for line in text.splitlines():
        out.write(f"  {line}")
