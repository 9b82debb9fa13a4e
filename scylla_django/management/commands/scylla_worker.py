"""`manage.py scylla_worker`: run the registered handlers of some queues."""

from __future__ import annotations

import gc
import importlib
import logging
import signal
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...backends import register_handlers
from ...conf import scylla_settings
from ...handlers import autodiscover, registry
from ...supervisor import EXIT_RECYCLED, WorkerProcesses
from ...worker import TaskWorker, WorkerOptions
from ...worker.options import ISOLATIONS
from ..base import (
    COMMAND_CHECKS,
    add_database_option,
    configure_logging,
    database_alias,
    lease_length,
    non_negative_int,
    positive_float,
    positive_int,
    queue_name,
    seconds,
)
from ..reloader import run_with_reloader
from ..stops import StopSignals, print_stacks_on_sigusr1, relayed_signals

# Exit status when handlers ignoring ctx.check() outlived the grace period of a shutdown.
EXIT_ABANDONED = 3

logger = logging.getLogger("scylla_django")


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Run a worker: lease tasks of the given queues while there is free capacity, run their "
        "handlers (from each app's handlers.py), heartbeat them and finish them. The first "
        "SIGTERM/SIGINT yields the running tasks and exits after a grace period: 0, or 3 if "
        "handlers were still running then (they are abandoned); a second signal exits at once "
        "with 1."
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
        add_database_option(parser, "worker")
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=1,
            help="tasks at a time: plain handlers on as many threads, async def handlers as "
            "coroutines with no thread each, so thousands are fine for them (default 1)",
        )
        parser.add_argument(
            "--prefetch",
            type=non_negative_int,
            default=WorkerOptions.prefetch,
            help="most tasks leased beyond --concurrency, waiting for a free handler, so that "
            "one statement leases and finishes many; taken while the handlers are quick (each "
            "of the last --concurrency runs under 50 ms), as many as they run in about 50 ms; "
            "given back when every handler has run one task for a second "
            f"(default {WorkerOptions.prefetch}; 0: never)",
        )
        parser.add_argument(
            "--lease-length",
            type=lease_length,
            default=None,
            help="lease length, at least 1s: seconds or a duration such as 30s, 5m (default "
            f"SCYLLA['LEASE_LENGTH'], now "
            f"{scylla_settings.LEASE_LENGTH.total_seconds():g}s)",
        )
        parser.add_argument(
            "--heartbeat-interval",
            type=seconds,
            default=None,
            help="seconds between heartbeats (default a quarter of the lease length)",
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
            "--processes",
            type=positive_int,
            default=1,
            help="worker processes, each a worker of its own with --concurrency slots, "
            "supervised by this one (default 1: this process is the worker)",
        )
        parser.add_argument(
            "--max-tasks",
            type=positive_int,
            default=None,
            help="lease no more after this many tasks, finish them and exit (under --processes "
            "the worker process is replaced)",
        )
        parser.add_argument(
            "--max-memory",
            type=positive_int,
            default=None,
            metavar="MB",
            help="a worker whose resident memory is past this many megabytes after a task "
            "leases no more, finishes its tasks and exits (under --processes it is replaced); "
            "under --isolation process a child process past it is replaced",
        )
        parser.add_argument(
            "--max-load",
            type=positive_float,
            default=None,
            metavar="LOAD",
            help="lease nothing while the host's load average (one minute) is over LOAD; "
            "the tasks in hand finish, and leasing resumes once it is back under",
        )
        parser.add_argument(
            "--isolation",
            choices=ISOLATIONS,
            default="thread",
            help="where plain handlers run: on the worker's threads (default), or each in a "
            "child process, so that a crash or a hang costs only its task",
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help="lease once (up to --concurrency tasks), finish them and exit",
        )
        parser.add_argument(
            "--listen-dsn",
            default=None,
            metavar="DSN",
            help="PostgreSQL: connection string of the LISTEN connection that wakes the worker "
            "(default: the settings of SCYLLA['LISTEN_DATABASE'], else of the database). Give "
            "the server itself, or a session-mode pool, when the database goes through a "
            "transaction-mode pooler",
        )
        parser.add_argument(
            "--no-listen",
            dest="listen",
            action="store_false",
            help="PostgreSQL: do not LISTEN; only poll",
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
        print_stacks_on_sigusr1()
        autodiscover()
        register_handlers()
        for module in options["handler_modules"]:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise CommandError(f"Cannot import handlers module {module!r}: {exc}") from exc

        def make_worker() -> TaskWorker:
            try:
                # Left out when not given: WorkerOptions' defaults follow the settings.
                given = {
                    key: options[key]
                    for key in ("lease_length", "heartbeat_interval")
                    if options[key] is not None
                }
                return TaskWorker(
                    WorkerOptions(
                        options["queues"],
                        concurrency=options["concurrency"],
                        prefetch=options["prefetch"],
                        poll_interval=options["poll_interval"],
                        max_tasks=options["max_tasks"],
                        max_memory=options["max_memory"],
                        max_load=options["max_load"],
                        isolation=options["isolation"],
                        grace_period=options["grace_period"],
                        registry=registry,
                        listen=options["listen"],
                        listen_dsn=options["listen_dsn"],
                        using=database_alias(options["database"]),
                        **given,
                    )
                )
            except (ValueError, ImproperlyConfigured) as exc:
                raise CommandError(str(exc)) from exc

        worker = make_worker()  # bad options fail here, before any process starts
        if options["reload"]:
            if options["processes"] > 1:
                raise CommandError("--reload runs one worker process; leave out --processes")
            with StopSignals(on_stop=worker.stop).installed():
                code = run_with_reloader(worker, once=options["once"])
            if code:
                raise CommandError(f"the worker exited with status {code}", returncode=code)
            return
        if options["processes"] > 1:
            self._supervise(make_worker, options["processes"], options["once"])
            return
        with StopSignals(on_stop=worker.stop).installed():
            worker.run(once=options["once"])
        # What the worker held is garbage now, and the collection at the interpreter's exit
        # walked all of it: seconds for a worker that held thousands of tasks, and a
        # supervisor waiting for it. The memory goes back with the process anyway.
        gc.freeze()
        if worker.abandoned:
            raise CommandError(
                f"{len(worker.abandoned)} handler(s) still running after the grace period "
                f"were abandoned (their tasks were yielded): {', '.join(worker.abandoned)}",
                returncode=EXIT_ABANDONED,
            )

    def _supervise(self, make_worker: Callable[[], TaskWorker], processes: int, once: bool) -> None:
        def child() -> int:
            worker = make_worker()
            with StopSignals(on_stop=worker.stop).installed():
                worker.run(once=once)
            gc.freeze()  # as above: no collection of what it held at the exit
            if worker.abandoned:
                return EXIT_ABANDONED
            return EXIT_RECYCLED if worker.recycled else 0

        supervisor = WorkerProcesses(child, processes)
        signals_seen = 0

        def handle(signum: int) -> None:
            nonlocal signals_seen
            signals_seen += 1
            name = signal.Signals(signum).name
            if signals_seen == 1:
                logger.info("%s received: stopping the worker processes gracefully", name)
                supervisor.stop()
            else:
                logger.warning("second %s: stopping the worker processes now", name)
                supervisor.stop_now()

        with relayed_signals(handle):
            code = supervisor.run()
        if code:
            raise CommandError(f"a worker process exited with status {code}", returncode=code)
