"""`manage.py scylla_tasks watch`: the running tasks' progress bars, refreshed every
`--interval` until Ctrl-C (redrawn in place on a terminal with rich installed, else a
plain-text frame at each refresh)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django.core.management.base import OutputWrapper

from ...db import read_clock
from ...durations import ago
from ...enums import Status
from ...models import Task
from ...text import plural
from ..terminal import percent, plain_table, rich_console, rich_table, text_bar
from .filters import selected

WATCH_COLUMNS = ("rn", "queue", "owner", "progress", "deadline")


def watch(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Watch the running tasks the filter options select, until Ctrl-C (or one frame)."""
    interval = options["interval"].total_seconds()
    console = rich_console(out)
    try:
        if console is None:
            watch_plain(out, options, interval)
        else:
            watch_live(console, options, interval)
    except KeyboardInterrupt:
        out.write("")


def running(options: dict[str, Any]) -> tuple[list[Task], int, int, datetime]:
    """The running tasks shown (oldest first), how many run and are ready, and now."""
    tasks_selected = selected(options)
    running = tasks_selected.filter(status=Status.RUNNING)
    tasks = list(
        running.defer("spec", "result", "errors").order_by("created", "id")[: options["limit"]]
    )
    count = len(tasks) if len(tasks) < options["limit"] else running.count()
    ready = tasks_selected.filter(status=Status.READY).count()
    return tasks, count, ready, read_clock(Task.objects.db)


def watch_plain(out: OutputWrapper, options: dict[str, Any], interval: float) -> None:
    while True:
        tasks, count, ready, now = running(options)
        out.write(summary(count, ready, now))
        rows = [
            (t.rn, t.queue, t.owner or "", text_bar(t.progress), deadline(t, now)) for t in tasks
        ]
        for line in plain_table(WATCH_COLUMNS, rows) if rows else []:
            out.write(line)
        out.flush()
        if options["once"]:
            return
        time.sleep(interval)
        out.write("")


def watch_live(console: Any, options: dict[str, Any], interval: float) -> None:
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    def bar(progress: float) -> Any:
        grid = Table.grid(padding=(0, 1))
        grid.add_row(ProgressBar(total=1.0, completed=progress, width=24), percent(progress))
        return grid

    def frame() -> Any:
        tasks, count, ready, now = running(options)
        rows = [(t.rn, t.queue, t.owner or "", bar(t.progress), deadline(t, now)) for t in tasks]
        return rich_table(WATCH_COLUMNS, rows, title=summary(count, ready, now))

    if options["once"]:
        console.print(frame())
        return
    from rich.live import Live

    with Live(frame(), console=console, auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(frame(), refresh=True)


def deadline(task: Task, now: datetime) -> str:
    """When a running task's lease ends, relative to now ("in 8 s", "2 s ago": expired)."""
    return ago(task.deadline, now) if task.deadline else ""


def summary(running: int, ready: int, now: datetime) -> str:
    """The line above the bars: `3 tasks running, 12 ready (19:30:01 UTC)`."""
    return f"{plural(running, 'task')} running, {ready:,} ready ({now:%H:%M:%S} UTC)"
