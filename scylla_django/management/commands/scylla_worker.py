"""`manage.py scylla_worker`: run the registered handlers of some queues."""

from __future__ import annotations

import importlib
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...backends import register_handlers
from ...conf import scylla_settings
from ...handlers import autodiscover, registry
from ...worker import TaskWorker
from ..base import StopSignals, configure_logging, duration, positive_int, queue_name, seconds
from ..reloader import run_with_reloader


class Command(BaseCommand):
    help = (
        "Run a worker: lease tasks of the given queues while there is free capacity, run their "
        "handlers (from each app's handlers.py), heartbeat them and finish them. The first "
        "SIGTERM/SIGINT yields the running tasks and exits 0 after a grace period; a second "
        "exits at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            dest="queues",
            action="append",
            type=queue_name,
            required=True,
            help="a queue to work on (repeatable)",
        )
        parser.add_argument(
            "--concurrency", type=positive_int, default=1, help="tasks at a time (default 1)"
        )
        parser.add_argument(
            "--lease-timeout",
            type=duration,
            default=None,
            help=f"lease length (default SCYLLA['LEASE_TIMEOUT'], now "
            f"{scylla_settings.LEASE_TIMEOUT.total_seconds():g}s)",
        )
        parser.add_argument(
            "--heartbeat-interval",
            type=seconds,
            default=None,
            help="seconds between heartbeats (default a third of the lease timeout)",
        )
        parser.add_argument(
            "--poll-interval",
            type=seconds,
            default=1.0,
            help="seconds between polls when idle (default 1)",
        )
        parser.add_argument(
            "--grace-period",
            type=seconds,
            default=30.0,
            help="seconds to wait for handlers on shutdown (default 30)",
        )
        parser.add_argument(
            "--max-tasks", type=positive_int, default=None, help="exit after this many tasks"
        )
        parser.add_argument(
            "--once", action="store_true", help="lease one batch, finish it and exit"
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="restart on code changes, yielding the running tasks first (development)",
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
            worker = TaskWorker(
                options["queues"],
                concurrency=options["concurrency"],
                lease_timeout=options["lease_timeout"],
                heartbeat_interval=options["heartbeat_interval"],
                poll_interval=options["poll_interval"],
                max_tasks=options["max_tasks"],
                grace_period=options["grace_period"],
                registry=registry,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if options["reload"]:
            with StopSignals(on_stop=worker.stop).installed():
                code = run_with_reloader(worker, once=options["once"])
            if code:
                raise CommandError(f"the worker exited with status {code}", returncode=code)
            return
        with StopSignals(on_stop=worker.stop).installed():
            worker.run(once=options["once"])
