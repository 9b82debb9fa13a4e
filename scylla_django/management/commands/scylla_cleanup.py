"""`manage.py scylla_cleanup`: delete old terminal tasks once, in chunks, with progress."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import scylla_settings
from ...durations import short
from ...enums import TERMINAL_STATUSES
from ...models import Task
from ...text import plural
from ..base import (
    COMMAND_CHECKS,
    add_setting_option,
    age,
    configure_logging,
    positive_int,
    queue_name,
)

# `--older-than 0`: every terminal task, whatever its age (`Task.objects.purgeable`).
ANY_AGE = timedelta(0)

STATUS_CHOICES = sorted(status.value for status in TERMINAL_STATUSES)


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Delete terminal tasks (completed, aborted, cancelled) not updated for --older-than, "
        "with their history, in chunks of --chunk-size tasks (one transaction each). Ready "
        "and running tasks are never deleted. --dry-run only counts what would be deleted. "
        "The same purge the monitor makes at every pass, run once with filters."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_setting_option(
            parser,
            "--older-than",
            setting="RETENTION",
            type=age,
            metavar="DURATION",
            help="Delete tasks not updated for this long, e.g. 12h, 7d, 2w (a bare number is "
            "seconds); 0 deletes every terminal task, whatever its age.",
        )
        parser.add_argument(
            "--status",
            action="append",
            choices=STATUS_CHOICES,
            default=None,
            help="Delete only tasks in this status; repeat for several. Default: all three.",
        )
        parser.add_argument(
            "--queue", type=queue_name, default=None, help="Delete only tasks of this queue."
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print how many tasks would be deleted, and delete nothing.",
        )
        add_setting_option(
            parser,
            "--chunk-size",
            setting="PURGE_CHUNK_SIZE",
            type=positive_int,
            metavar="N",
            help="Tasks deleted per transaction.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        try:
            given: timedelta | None = options["older_than"]
            older_than = scylla_settings.RETENTION if given is None else given or ANY_AGE
            chunk_size: int = options["chunk_size"] or scylla_settings.PURGE_CHUNK_SIZE
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        statuses: list[str] = options["status"] or STATUS_CHOICES
        queue: str | None = options["queue"]
        tasks = Task.objects.all()
        try:
            if options["dry_run"]:
                count = tasks.purgeable(older_than, statuses, queue).count()
                self.stdout.write(f"would delete {plural(count, 'task')}")
                return
            if self.stdout.isatty():
                deleted = self._purge_showing_progress(older_than, statuses, queue, chunk_size)
            else:
                deleted = tasks.purge(older_than, statuses, queue, chunk_size=chunk_size)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        self.stdout.write(f"deleted {plural(deleted, 'task')}")
        if options["verbosity"] >= 2:
            aged = "any age" if older_than == ANY_AGE else f"not updated for {short(older_than)}"
            self.stdout.write(
                f"(status {', '.join(sorted(set(statuses)))}; {aged}; queue {queue or 'any'})"
            )

    def _purge_showing_progress(
        self, older_than: timedelta, statuses: list[str], queue: str | None, chunk_size: int
    ) -> int:
        """Purge, rewriting one line "deleted 3000/12000 (25%)" after each batch (a terminal)."""
        total = Task.objects.purgeable(older_than, statuses, queue).count()
        done = 0
        width = 0

        def show(count: int) -> None:
            nonlocal done, width
            done += count
            # Tasks may become eligible while we run: never show more than 100%.
            whole = max(total, done)
            line = f"deleted {done}/{whole} ({100 * done // whole if whole else 100}%)"
            self.stdout.write("\r" + line.ljust(width), ending="")
            self.stdout.flush()
            width = len(line)

        show(0)
        try:
            deleted = Task.objects.purge(
                older_than, statuses, queue, chunk_size=chunk_size, on_chunk=show
            )
        finally:
            self.stdout.write("\r" + " " * width + "\r", ending="")
        return deleted
