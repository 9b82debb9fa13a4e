"""`manage.py scylla_run RN`: run one task's handler in the foreground (a debug run). It exits 0
when the task completed, 1 (with why on stderr) when it did not: aborted, snoozed, stopped or
refused."""

from __future__ import annotations

import importlib
import json
import pdb
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...backends import register_handlers
from ...exceptions import Parked, ScyllaError
from ...handlers import autodiscover
from ...models import Task
from ...worker.foreground import run_task
from ..base import COMMAND_CHECKS, configure_logging, lease_length


def post_mortem(exc: BaseException) -> None:
    """Drop into pdb where `exc` was raised."""
    pdb.post_mortem(exc.__traceback__)


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Lease the ready task RN (as a worker registered for this run), run its handler here "
        "with its logs on the console and write its outcome; exit 0 if the task completed, 1 "
        "otherwise. --dry-run rolls all of it back; --pdb opens the debugger where the "
        "handler raised."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("rn", metavar="RN", help="the rn of a ready task")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="run in one transaction that is rolled back: the database is left as it was",
        )
        parser.add_argument(
            "--pdb", action="store_true", help="post-mortem debugging if the handler raises"
        )
        parser.add_argument(
            "--lease-length",
            type=lease_length,
            default=None,
            help="lease length (default SCYLLA['LEASE_LENGTH']); heartbeats keep it meanwhile",
        )
        parser.add_argument(
            "--handlers",
            dest="handler_modules",
            action="append",
            default=[],
            metavar="DOTTED.MODULE",
            help="also import this module of handlers (repeatable)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        autodiscover()
        register_handlers()
        for module in options["handler_modules"]:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise CommandError(f"Cannot import handlers module {module!r}: {exc}") from exc
        try:
            run = run_task(
                options["rn"],
                dry_run=options["dry_run"],
                lease_length=options["lease_length"],
                post_mortem=post_mortem if options["pdb"] else None,
            )
        except (ScyllaError, ValueError, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from exc
        task = run.task
        outcome = run.outcome
        if isinstance(run.stop, Parked):
            failure = f"{task.rn} {run.stop}: it is ready again when the wait ends"
        elif outcome is None:
            failure = f"{task.rn} was stopped: {run.stop}; nothing was written"
        elif outcome.snooze is not None:
            failure = f"{task.rn} snoozed: it is ready again in {outcome.snooze}"
        elif outcome.errors is not None:
            failure = f"{task.rn} aborted: {json.dumps(outcome.errors)[:2000]}"
            retries = Task.objects.filter(retry_of=task.rn).values_list("rn", flat=True)
            retry = None if options["dry_run"] else retries.first()
            if retry is not None:
                failure += f"\nits retry {retry} was submitted"
        else:
            failure = None
            self.stdout.write(f"{task.rn} completed: {json.dumps(outcome.result)}")
        if options["dry_run"]:
            self.stdout.write("dry run: rolled back, the database is as it was")
        elif outcome is not None and not run.written:
            raise CommandError(f"The outcome of {task.rn} was not written: it is {task.status}.")
        if failure is not None:
            raise CommandError(failure)
