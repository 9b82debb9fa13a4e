"""`manage.py scylla_schedules`: list, show, pause, resume and run schedules now; why one
does not fire now, and its calendar of next runs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import schedules
from ...db import read_clock
from ...durations import short
from ...exceptions import ScyllaError
from ...models import Schedule, Task, WaitingRun
from ...schedules import calendars, firings, triggers
from ...validation import validate_schedule_name
from ..base import COMMAND_CHECKS, positive_int, reader_may_leave
from ..tasks.formats import message, when
from ..terminal import plain_table, rich_console, rich_table

LIST_COLUMNS = ("name", "kind", "state", "next run (UTC)", "last run (UTC)")
CALENDAR_COLUMNS = ("tick (UTC)", "local time", "DST", "runs (UTC)", "note")
RECENT_SHOWN = 10


def schedule_name(text: str) -> str:
    """argparse type: a well-formed schedule name."""
    try:
        return validate_schedule_name(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {' '.join(exc.messages)}") from None


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Schedules from the command line: list them, show one with its state and recent "
        "firings, pause and resume, run one now (as the admin's and the API's 'Run now'), say "
        "why one does not fire now and list its next runs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="operation", required=True, metavar="OPERATION")
        commands.add_parser(
            "list",
            help="Every schedule: its kind, state, next and last run.",
            description="Every schedule by name: cron, every or trigger, enabled or paused, "
            "its next run and its last run.",
        )
        show = commands.add_parser(
            "show",
            help="One schedule: its definition, state and recent firings.",
            description="One schedule: its definition, its state (next and last run, the "
            "firing that waits for its run constraints) and its recent tasks and firings.",
        )
        show.add_argument("name", type=schedule_name, metavar="NAME")
        pause = commands.add_parser(
            "pause",
            help="Disable a schedule: nothing fires it until it is resumed.",
            description="Disable a schedule (the admin's 'Disable'): no tick or trigger fires "
            "it until it is resumed.",
        )
        pause.add_argument("name", type=schedule_name, metavar="NAME")
        resume = commands.add_parser(
            "resume",
            help="Enable a paused schedule; the ticks missed meanwhile are not caught up.",
            description="Enable a paused schedule (the admin's 'Enable'): its next run is set "
            "from now, so the ticks missed while it was paused are not caught up.",
        )
        resume.add_argument("name", type=schedule_name, metavar="NAME")
        run = commands.add_parser(
            "run-now",
            help="Submit the schedule's task at once, outside its ticks.",
            description="Submit the schedule's task at once, outside its ticks (the admin's "
            "and the API's 'Run now', POST /schedules/{name}/run/).",
        )
        run.add_argument("name", type=schedule_name, metavar="NAME")
        why = commands.add_parser(
            "why",
            help="Why the schedule does not fire now.",
            description="The run constraints unmet now, the firing that waits for them and, "
            "for a trigger, where it counts events from and what is unmet "
            "(GET /schedules/{name}/why/).",
        )
        why.add_argument("name", type=schedule_name, metavar="NAME")
        calendar = commands.add_parser(
            "calendar",
            help="The schedule's next ticks, with daylight-saving changes marked.",
            description="The next ticks, with daylight-saving gaps and repeated hours marked "
            "and the windows applied (GET /schedules/{name}/calendar/).",
        )
        calendar.add_argument("name", type=schedule_name, metavar="NAME")
        calendar.add_argument(
            "--count",
            type=positive_int,
            default=10,
            metavar="N",
            help=f"How many ticks (default 10, at most {calendars.MAX_CALENDAR}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        operation = options["operation"]
        try:
            with reader_may_leave():
                getattr(self, f"do_{operation.replace('-', '_')}")(options)
        except (ScyllaError, ValidationError) as exc:
            raise CommandError(message(exc)) from exc

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """`rows` drawn by rich on a terminal, as plain aligned text otherwise."""
        console = rich_console(self.stdout)
        if console is not None:
            console.print(rich_table(headers, rows))
            return
        for line in plain_table(headers, rows):
            self.stdout.write(line)

    def fields(self, fields: list[tuple[str, str]]) -> None:
        """`name  value` lines, aligned, the empty values left out."""
        width = max(len(name) for name, _ in fields)
        for name, value in fields:
            if value:
                self.stdout.write(f"{name:<{width}}  {value}")

    # -- reading ----------------------------------------------------------------------------

    def do_list(self, options: dict[str, Any]) -> None:
        found = list(Schedule.objects.order_by("name"))
        if not found:
            self.stdout.write("No schedule.")
            return
        rows = [
            (
                s.name,
                kind(s),
                state(s),
                minute(s.next_run),
                minute(s.last_run),
            )
            for s in found
        ]
        self.table(LIST_COLUMNS, rows)

    def do_show(self, options: dict[str, Any]) -> None:
        schedule = get_schedule(options["name"])
        now = read_clock(Schedule.objects.db)
        last_status = None
        if schedule.last_task:
            found = Task.objects.filter(rn=schedule.last_task).values_list("status", flat=True)
            last_status = found.first() or "purged"
        constraints_shown = [
            ("window", ", ".join(schedule.window or [])),
            ("min gap", short(schedule.min_gap) if schedule.min_gap else ""),
            ("max runs", schedule.max_runs),
            ("max concurrent", str(schedule.max_concurrent or "")),
            ("wait timeout", short(schedule.wait_timeout) if schedule.wait_timeout else ""),
        ]
        constrained = any(value for _, value in constraints_shown)
        waiting = waiting_text(schedule)
        self.fields(
            [
                ("name", schedule.name),
                ("kind", kind(schedule)),
                ("timing", timing(schedule)),
                ("timezone", schedule.timezone),
                ("queue", schedule.queue),
                ("priority", str(schedule.priority)),
                ("catch up", schedule.catch_up if schedule.trigger is None else ""),
                ("skip if running", "yes" if schedule.skip_if_running else ""),
                *constraints_shown,
                ("when unmet", schedule.when_unmet if constrained else ""),
                ("on timeout", schedule.on_timeout if schedule.wait_timeout else ""),
                ("state", state(schedule)),
                ("from settings", "yes" if schedule.from_settings else ""),
                ("next run", when(schedule.next_run, now) or "-"),
                ("last run", when(schedule.last_run, now) or "-"),
                ("last task", f"{schedule.last_task} ({last_status})" if last_status else "-"),
                ("waiting", waiting),
            ]
        )
        self.stdout.write("spec:")
        for line in json.dumps(schedule.spec, indent=2, sort_keys=True).splitlines():
            self.stdout.write(f"  {line}")
        tasks = list(
            Task.objects.filter(rn__startswith=f"schedule:{schedule.name}:")
            .only("rn", "status", "created")
            .order_by("-created", "-id")[:RECENT_SHOWN]
        )
        self.stdout.write("recent tasks:" if tasks else "recent tasks: none")
        rows = [(when(t.created, now), t.rn, str(t.status)) for t in tasks]
        for line in plain_table(("created", "rn", "status"), rows) if rows else []:
            self.stdout.write(f"  {line}")
        if schedule.trigger is None:
            return
        fired = firings.latest_firings(schedule, RECENT_SHOWN)
        self.stdout.write("recent firings:" if fired else "recent firings: none")
        firing_rows = [
            (
                when(f.time, now),
                f.rn,
                str(f.outcome),
                "" if f.due is None else f"due {when(f.due, now)}",
                ", ".join(f"{c.event.kind} #{c.event.pk}" for c in f.consumptions.all()),
            )
            for f in fired
        ]
        headers = ("time", "task", "outcome", "due", "events consumed")
        for line in plain_table(headers, firing_rows) if firing_rows else []:
            self.stdout.write(f"  {line}")

    def do_why(self, options: dict[str, Any]) -> None:
        schedule = get_schedule(options["name"])
        answer = firings.why(schedule, read_clock(Schedule.objects.db))
        now = answer["now"]
        if not answer["enabled"]:
            verdict = "no: it is paused"
        elif answer["runs"]:
            verdict = "yes: every run constraint is met, a firing now would run at once"
        else:
            verdict = "no: see below"
        self.fields(
            [
                ("name", answer["name"]),
                ("runs now", verdict),
                ("now", f"{now:%Y-%m-%d %H:%M:%S} UTC"),
                ("next run", when(answer["next_run"], now) or "-"),
            ]
        )
        for unmet in answer["unmet"]:
            line = f"unmet: {unmet['code']}: {unmet['detail']}"
            if unmet["until"] is not None:
                line += f" (until {when(unmet['until'], now)})"
            self.stdout.write(line)
        if answer["waiting"] is not None:
            self.stdout.write(f"waiting: {waiting_text(schedule)}")
        trigger = answer["trigger"]
        if trigger is None:
            return
        if trigger["counts_after"] is None:
            counts = f"every event no firing of it consumed (since: {trigger['since']})"
        else:
            counts = (
                f"after event #{trigger['counts_after']}, from "
                f"{trigger['counts_from']:%Y-%m-%d %H:%M:%S} UTC (since: {trigger['since']})"
            )
        self.stdout.write(f"trigger counts: {counts}")
        for words in trigger["unmet"]:
            self.stdout.write(f"trigger unmet: {words}")
        if not trigger["unmet"]:
            self.stdout.write("trigger unmet: nothing, it fires at the monitor's next pass")
        for firing in trigger["delayed"]:
            self.stdout.write(f"delayed: {firing.rn} due {when(firing.due, now)}")

    def do_calendar(self, options: dict[str, Any]) -> None:
        schedule = get_schedule(options["name"])
        if schedule.trigger is not None:
            self.stdout.write(f"{schedule.name} has no ticks: it fires on events.")
            return
        count = min(options["count"], calendars.MAX_CALENDAR)
        entries = calendars.calendar(schedule, read_clock(Schedule.objects.db), count)
        rows = [
            (
                f"{e.tick:%Y-%m-%d %H:%M:%S}",
                f"{e.local:%Y-%m-%d %H:%M:%S %Z}",
                calendars.dst_text(e),
                "-" if e.runs is None else f"{e.runs:%Y-%m-%d %H:%M:%S}",
                e.note,
            )
            for e in entries
        ]
        self.table(CALENDAR_COLUMNS, rows)
        if not schedule.enabled:
            self.stdout.write(f"({schedule.name} is paused: none of these fires until resumed)")

    # -- operations -------------------------------------------------------------------------

    def do_pause(self, options: dict[str, Any]) -> None:
        schedule = get_schedule(options["name"])
        if schedules.pause(Schedule.objects.filter(pk=schedule.pk)):
            self.stdout.write(f"paused {schedule.name}")
        else:
            self.stdout.write(f"{schedule.name} was paused already")

    def do_resume(self, options: dict[str, Any]) -> None:
        schedule = get_schedule(options["name"])
        if not schedules.resume(Schedule.objects.filter(pk=schedule.pk)):
            self.stdout.write(f"{schedule.name} was enabled already")
            return
        schedule.refresh_from_db(fields=["next_run"])
        now = read_clock(Schedule.objects.db)
        after = f"next run {when(schedule.next_run, now)}" if schedule.next_run else "on events"
        self.stdout.write(f"resumed {schedule.name}: {after}")

    def do_run_now(self, options: dict[str, Any]) -> None:
        task = schedules.run_now(get_schedule(options["name"]))
        self.stdout.write(f"submitted {task.rn} (queue {task.queue}, {task.status})")


def get_schedule(name: str) -> Schedule:
    """The schedule called `name`, or a CommandError naming it."""
    schedule = Schedule.objects.select_related("waiting").filter(name=name).first()
    if schedule is None:
        raise CommandError(f"No schedule is called {name!r}.")
    return schedule


def kind(schedule: Schedule) -> str:
    """ "cron", "every" or "trigger"."""
    if schedule.trigger is not None:
        return "trigger"
    return "every" if schedule.every is not None else "cron"


def timing(schedule: Schedule) -> str:
    """When a schedule fires, in words: `0 3 * * * (Europe/Malta)`, `every 5m`, `on ...`."""
    if schedule.trigger is not None:
        return "on " + "; ".join(triggers.describe(t) for t in triggers.leaves(schedule.trigger))
    if schedule.every is not None:
        return f"every {short(schedule.every)}"
    return f"{schedule.cron} ({schedule.timezone})"


def state(schedule: Schedule) -> str:
    """ "enabled", "paused", or "enabled, waiting" while a firing waits for its constraints."""
    if not schedule.enabled:
        return "paused"
    return "enabled, waiting" if waiting_text(schedule) else "enabled"


def waiting_text(schedule: Schedule) -> str:
    """The firing held for the run constraints, in words, or ""."""
    try:
        waiting = schedule.waiting
    except WaitingRun.DoesNotExist:
        return ""
    text = f"{waiting.rn}: {waiting.reason} (since {waiting.since:%Y-%m-%d %H:%M:%S} UTC"
    if waiting.merged:
        text += f", {waiting.merged} later firing(s) merged"
    if waiting.deadline is not None:
        text += f", {schedule.on_timeout} at {waiting.deadline:%Y-%m-%d %H:%M:%S} UTC"
    return text + ")"


def minute(moment: datetime | None) -> str:
    """A moment in UTC to the minute, or "-"."""
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M}"
