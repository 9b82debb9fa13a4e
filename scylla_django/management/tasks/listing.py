"""`manage.py scylla_tasks list`: the tasks the filters select, newest first."""

from __future__ import annotations

from typing import Any

from django.core.management.base import OutputWrapper

from ...db import read_clock
from ...durations import ago
from ...models import Task
from ..terminal import percent, plain_table, rich_console, rich_table
from .filters import selected
from .formats import first_error

LIST_COLUMNS = ("rn", "queue", "status", "progress", "attempt", "owner", "updated", "error")


def list_tasks(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Write the tasks the filter options select, newest first, up to `--limit`."""
    tasks = list(
        selected(options).defer("spec", "result").order_by("-created", "-id")[: options["limit"]]
    )
    if not tasks:
        out.write("No task matches.")
        return
    now = read_clock(Task.objects.db)
    rows = [
        (
            task.rn,
            task.queue,
            task.status,
            percent(task.progress),
            str(task.attempt),
            task.owner or "",
            ago(task.updated, now),
            first_error(task),
        )
        for task in tasks
    ]
    console = rich_console(out)
    if console is not None:
        console.print(rich_table(LIST_COLUMNS, rows))
    else:
        for line in plain_table(LIST_COLUMNS, rows):
            out.write(line)
    if len(tasks) == options["limit"]:
        out.write(f"(the first {options['limit']}; --limit shows more)")
