"""The filters `scylla_tasks list` and `watch` share with GET /tasks/: their arguments, and the
tasks they select."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...db import read_clock
from ...enums import Status
from ...models import Task, TaskQuerySet
from ..base import duration, queue_name
from .arguments import rn_argument, text_argument


def add_filters(parser: CommandParser, *, statuses: bool) -> None:
    """The filters `list` and `watch` share with GET /tasks/."""
    if statuses:
        parser.add_argument(
            "--status",
            action="append",
            choices=list(Status.values),
            default=None,
            help="Only tasks in this status; repeat for several.",
        )
    parser.add_argument("--queue", type=queue_name, help="Only tasks of this queue.")
    parser.add_argument(
        "--owner", type=text_argument, help="Only tasks held (or last held) by this worker."
    )
    parser.add_argument(
        "--rn-prefix", type=text_argument, metavar="PREFIX", help="Only rns starting so."
    )
    parser.add_argument(
        "--root", type=rn_argument, metavar="RN", help="Only the retry chain of this task."
    )
    parser.add_argument(
        "--error-code", type=text_argument, metavar="CODE", help="Only tasks with this error."
    )
    parser.add_argument(
        "--updated-within",
        type=duration,
        metavar="DURATION",
        help="Only tasks updated in the last DURATION, e.g. 15m, 2h, 7d.",
    )


def selected(options: dict[str, Any]) -> TaskQuerySet:
    """The tasks the filter options select."""
    tasks = Task.objects.all()
    if options.get("status"):
        tasks = tasks.filter(status__in=sorted(set(options["status"])))
    if options["queue"]:
        tasks = tasks.filter(queue=options["queue"])
    if options["owner"]:
        tasks = tasks.filter(owner=options["owner"])
    if options["rn_prefix"]:
        tasks = tasks.filter(rn__startswith=options["rn_prefix"])
    if options["root"]:
        tasks = tasks.in_chain(options["root"])
    if options["error_code"]:
        tasks = tasks.with_error_code(options["error_code"])
    if options["updated_within"]:
        tasks = tasks.filter(updated__gte=read_clock(tasks.db) - options["updated_within"])
    return tasks
