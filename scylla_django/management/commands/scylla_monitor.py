"""`manage.py scylla_monitor`: reset expired leases and purge old terminal tasks, in a loop."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import Error as DatabaseError

from ...conf import scylla_settings
from ...handlers import autodiscover
from ...monitor import Monitor
from ..base import (
    COMMAND_CHECKS,
    add_database_option,
    add_setting_option,
    configure_logging,
    database_alias,
    duration,
    seconds,
)
from ..stops import StopSignals, print_stacks_on_sigusr1


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Run the scylla_django monitor: every --interval seconds (every second at most), give "
        "expired leases back (running tasks whose deadline passed become ready again, with a "
        "TaskTimeout in their history, or are aborted after MAX_LEASES), and every --interval "
        "seconds delete completed, aborted and "
        "cancelled tasks not updated for --retention. Any number of monitors may run at once. "
        "It keeps going through database outages, retrying with a backoff. SIGTERM or SIGINT "
        "stops it after the current pass (exit status 0); a second one stops it at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval",
            type=seconds,
            default=5.0,
            metavar="SECONDS",
            help="Time between the starts of two passes: seconds, or with a unit (500ms, 1m). "
            "Default: 5.",
        )
        add_setting_option(
            parser,
            "--retention",
            setting="RETENTION",
            type=duration,
            metavar="DURATION",
            help="Purge terminal tasks not updated for this long, e.g. 12h, 7d, 2w.",
            read=", read at every pass",
        )
        add_database_option(parser, "monitor")
        parser.add_argument(
            "--once",
            action="store_true",
            help="Make one pass, print 'reset N, purged M' and exit; a database error fails it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        print_stacks_on_sigusr1()
        using = database_alias(options["database"])
        retention: timedelta | None = options["retention"]
        if retention is None:
            try:
                scylla_settings.RETENTION  # noqa: B018 - fail now, not at the first pass
            except ImproperlyConfigured as exc:
                raise CommandError(str(exc)) from exc
        # An invalid schedule in the settings does not stop the monitor: the schedule service
        # skips it, logs it and ticks the others.
        # Handler retry policies (@handler(..., retry=...)) then also cover expired leases.
        autodiscover()
        monitor = Monitor(interval=options["interval"], retention=retention, using=using)
        signals = StopSignals()
        with signals.installed():
            try:
                monitor.run(stop=signals.requested, once=options["once"])
            except DatabaseError as exc:  # only with --once: the loop retries
                raise CommandError(f"database error: {type(exc).__name__}: {exc}") from exc
        if options["once"] and monitor.last_pass is not None:
            self.stdout.write(f"reset {monitor.last_pass.reset}, purged {monitor.last_pass.purged}")
