"""`manage.py scylla_tasks`: list, show, forecast (eta), watch, cancel, retry, requeue, pause,
resume and delete tasks. The command parses the arguments and dispatches; each group of
subcommands does its work in its module of `management/tasks/`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from ...exceptions import ScyllaError
from ..base import COMMAND_CHECKS, duration, positive_int, reader_may_leave
from ..tasks import forecasting, listing, operations, showing, watching
from ..tasks.arguments import rn_argument, what_if_argument
from ..tasks.filters import add_filters
from ..tasks.formats import message

OPERATIONS: dict[str, Callable[[OutputWrapper, dict[str, Any]], None]] = {
    "list": listing.list_tasks,
    "show": showing.show,
    "eta": forecasting.eta,
    "watch": watching.watch,
    "cancel": operations.cancel,
    "retry": operations.retry,
    "requeue": operations.requeue,
    "discard": operations.discard,
    "release-order": operations.release_order,
    "pause": operations.pause,
    "resume": operations.resume,
    "delete": operations.delete,
}
"""The work of each subcommand, by name."""


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Tasks from the command line: list them with the API's filters, show one with its "
        "history and errors, forecast when a ready one starts (eta), watch the running ones' "
        "progress live, cancel, retry (a new linked "
        "attempt), requeue (reset the lease of a task whose worker is gone), discard a dead "
        "letter or release the order key an aborted task holds; pause a ready task (no lease "
        "takes it), resume it, or delete one that has not started."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="operation", required=True, metavar="OPERATION")

        listing = commands.add_parser(
            "list",
            help="Tasks, newest first, filtered.",
            description="Tasks, newest first, with the filters of GET /tasks/.",
        )
        add_filters(listing, statuses=True)
        listing.add_argument(
            "--limit", type=positive_int, default=50, help="Show at most N tasks (default 50)."
        )

        show = commands.add_parser(
            "show",
            help="One task: its fields, errors and history.",
            description="One task: its fields, errors, result and history.",
        )
        show.add_argument("rn", type=rn_argument, metavar="RN")
        show.add_argument(
            "--log", action="store_true", help="Print the task's log after its fields."
        )

        eta = commands.add_parser(
            "eta",
            help="When a ready task is expected to start, and the rule that decides it.",
            description=(
                "A forecast of a ready task's start from the rules in force (its place in the "
                "queue, the live workers, its limits, locks, order key and rate, the run times "
                "measured on its queue), each rule played forward, and the bottleneck. "
                "--what-if changes a rule for the forecast only; nothing is written."
            ),
        )
        eta.add_argument("rn", type=rn_argument, metavar="RN")
        eta.add_argument(
            "--what-if",
            action="append",
            default=[],
            type=what_if_argument,
            metavar="NAME=VALUE",
            help="limit.<name>=N, max_running=N, workers=N or run_time=SECONDS (repeatable).",
        )

        watch = commands.add_parser(
            "watch",
            help="The running tasks' progress, refreshed until Ctrl-C.",
            description="Progress bars of the running tasks, refreshed every --interval until "
            "Ctrl-C. On a terminal with rich installed the screen is redrawn in place; "
            "otherwise a plain-text frame is printed at each refresh.",
        )
        add_filters(watch, statuses=False)
        watch.add_argument(
            "--interval",
            type=duration,
            default=timedelta(seconds=1),
            metavar="DURATION",
            help="Time between refreshes, e.g. 500ms, 2s (default 1s).",
        )
        watch.add_argument(
            "--limit", type=positive_int, default=30, help="Show at most N tasks (default 30)."
        )
        watch.add_argument("--once", action="store_true", help="Print one frame and exit.")

        cancel = commands.add_parser(
            "cancel",
            help="Cancel ready or running tasks.",
            description="ready or running → cancelled. A running task's worker stops it at its "
            "next check or heartbeat.",
        )
        cancel.add_argument("rns", type=rn_argument, nargs="+", metavar="RN")

        retry = commands.add_parser(
            "retry",
            help="Submit an aborted or cancelled task again, as the next attempt of its chain.",
            description="Submit an aborted or cancelled task again, as the next attempt of its "
            "chain (as the admin's and the API's retry do).",
        )
        retry.add_argument("rn", type=rn_argument, metavar="RN")

        requeue = commands.add_parser(
            "requeue",
            help="Reset the lease of a running task whose worker is gone: ready again now.",
            description="Reset the lease of a running task whose worker is silent, dead or "
            "stopped, without waiting for its deadline (the admin's 'Reset lease now'). Refused "
            "while the worker still heartbeats.",
        )
        requeue.add_argument("rn", type=rn_argument, metavar="RN")

        discard = commands.add_parser(
            "discard",
            help="Let a dead letter go: it stays aborted and is purged after RETENTION.",
            description="Let a dead letter go (the admin's and the API's discard): it stays "
            "aborted, is no longer dead, and is purged after RETENTION. To run it again "
            "instead, retry it.",
        )
        discard.add_argument("rn", type=rn_argument, metavar="RN")

        release = commands.add_parser(
            "release-order",
            help="Release the order key an aborted task holds: its key's later tasks run.",
            description="A task of an order key that aborted for good with order_on_failure "
            "'block' keeps the key's later tasks waiting until it is retried or released here "
            "(the admin's and the API's release): one write, with a History TaskOrderRelease; "
            "the task stays aborted.",
        )
        release.add_argument("rn", type=rn_argument, metavar="RN")

        pause = commands.add_parser(
            "pause",
            help="Keep ready tasks from every lease until resumed (they stay ready).",
            description="Pause ready tasks (the admin's and the API's pause): no worker leases "
            "them until they are resumed; they are not cancelled, and 'show' says why they "
            "wait.",
        )
        pause.add_argument("rns", type=rn_argument, nargs="+", metavar="RN")

        resume = commands.add_parser(
            "resume",
            help="Resume paused tasks: leased again as before.",
            description="End the pause of tasks (the admin's and the API's resume): their own "
            "not_before is back, and workers lease them as before.",
        )
        resume.add_argument("rns", type=rn_argument, nargs="+", metavar="RN")

        delete = commands.add_parser(
            "delete",
            help="Delete a ready task that has not started, keeping a record of it.",
            description="Delete a ready task at once (the API's DELETE /tasks/{rn}/): its rn "
            "is free again, and a record with its History is kept (TaskDeletion). A running "
            "or finished task is refused: cancel it instead.",
        )
        delete.add_argument("rn", type=rn_argument, metavar="RN")

    def handle(self, *args: Any, **options: Any) -> None:
        operation = OPERATIONS[options["operation"]]
        try:
            with reader_may_leave():
                operation(self.stdout, options)
        except (ScyllaError, ValidationError) as exc:
            raise CommandError(message(exc)) from exc
