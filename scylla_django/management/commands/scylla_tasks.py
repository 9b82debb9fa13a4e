"""`manage.py scylla_tasks`: list, show, forecast (eta), watch, cancel, retry, requeue, pause,
resume and delete tasks."""

from __future__ import annotations

import argparse
import getpass
import json
import time
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import logs
from ...db import read_clock
from ...durations import ago, short
from ...enums import Status
from ...exceptions import InvalidTransition, ScyllaError
from ...models import Task, TaskOrigin, TaskQuerySet, key_control
from ...models.forecast import Forecast, WhatIf
from ...models.waits import durable_record
from ...text import plural
from ...validation import RN_MAX_LENGTH, rn_validator
from ..base import duration, positive_int, queue_name, reader_may_leave
from ..terminal import percent, plain_table, rich_console, rich_table, text_bar

LIST_COLUMNS = ("rn", "queue", "status", "progress", "attempt", "owner", "updated", "error")
WATCH_COLUMNS = ("rn", "queue", "owner", "progress", "deadline")
HISTORY_SHOWN = 50


def rn_argument(text: str) -> str:
    """argparse type: a well-formed rn."""
    try:
        rn_validator(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {' '.join(exc.messages)}") from None
    if len(text) > RN_MAX_LENGTH:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than {RN_MAX_LENGTH} characters")
    return text


def text_argument(text: str) -> str:
    """argparse type: a non-empty value of at most 100 characters, without NUL."""
    if not text or len(text) > 100 or "\x00" in text:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 to 100 characters, without NUL")
    return text


def what_if_argument(text: str) -> tuple[str, str]:
    """argparse type: NAME=VALUE of a what-if (WhatIf.parse checks the value)."""
    name, equals, value = text.partition("=")
    if not equals or not name or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: write NAME=VALUE, e.g. limit.stripe=6")
    return name, value


def submitted_by(task: Task) -> str:
    """Who submitted `task`, in words: "ann (token 1f2e…)", "nightly import", "system"."""
    origin = TaskOrigin.objects.filter(task=task).select_related("user").first()
    if origin is None:
        return "system"
    who = origin.name or (origin.user.get_username() if origin.user else origin.kind)
    if origin.token:
        who += f" (token {origin.token[:8]}…)"
    if origin.admission_key:
        who += f", admission key {origin.admission_key}"
    return who + (f": {origin.description}" if origin.description else "")


def forecast_line(forecast: Forecast, now: datetime) -> str:
    """A forecast in one line: when, and the rule that decides it."""
    if forecast.starts_at is None:
        return f"unknown: {forecast.detail}"
    if not forecast.wait:
        return "may start now"
    return f"{when(forecast.starts_at, now)}: {forecast.detail}"


class Command(BaseCommand):
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
        self.add_filters(listing, statuses=True)
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
        self.add_filters(watch, statuses=False)
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

    def add_filters(self, parser: CommandParser, *, statuses: bool) -> None:
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

    def handle(self, *args: Any, **options: Any) -> None:
        operation = options["operation"]
        try:
            with reader_may_leave():
                getattr(self, f"do_{operation.replace('-', '_')}")(options)
        except (ScyllaError, ValidationError) as exc:
            raise CommandError(message(exc)) from exc

    # -- reading ----------------------------------------------------------------------------

    def selected(self, options: dict[str, Any]) -> TaskQuerySet:
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

    def do_list(self, options: dict[str, Any]) -> None:
        tasks = list(
            self.selected(options)
            .defer("spec", "result")
            .order_by("-created", "-id")[: options["limit"]]
        )
        if not tasks:
            self.stdout.write("No task matches.")
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
        console = rich_console(self.stdout)
        if console is not None:
            console.print(rich_table(LIST_COLUMNS, rows))
        else:
            for line in plain_table(LIST_COLUMNS, rows):
                self.stdout.write(line)
        if len(tasks) == options["limit"]:
            self.stdout.write(f"(the first {options['limit']}; --limit shows more)")

    def do_show(self, options: dict[str, Any]) -> None:
        task = Task.objects.get_by_rn(options["rn"])
        now = read_clock(Task.objects.db)
        fields: list[tuple[str, str]] = [
            ("rn", task.rn),
            ("queue", task.queue),
            ("status", task.status),
            ("progress", percent(task.progress)),
            ("priority", str(task.priority)),
            ("attempt", str(task.attempt)),
            ("root", task.root or ""),
            ("retry of", task.retry_of or ""),
            ("owner", task.owner or ""),
            ("lease", str(task.leases)),
            ("lease length", short(task.lease_length) if task.lease_length else ""),
            ("deadline", when(task.deadline, now)),
            ("not before", when(task.not_before, now)),
            ("created", when(task.created, now)),
            ("updated", when(task.updated, now)),
            ("unique key", task.unique_key or ""),
            ("submitted by", submitted_by(task)),
        ]
        width = max(len(name) for name, _ in fields)
        for name, value in fields:
            if value:
                self.stdout.write(f"{name:<{width}}  {value}")
        for reason in task.waiting_reasons():
            self.stdout.write(f"{'waits':<{width}}  {reason['detail']}")
        if task.status == Status.READY:
            self.stdout.write(f"{'starts':<{width}}  {forecast_line(task.forecast(), now)}")
        self.write_json("spec", task.spec)
        if task.result is not None:
            self.write_json("result", task.result)
        if task.errors:
            self.stdout.write("errors:")
            for error in task.errors:
                line = f"  {error.get('code', '?')}"
                if error.get("description"):
                    line += f": {error['description']}"
                self.stdout.write(line)
        entries = list(task.history.order_by("-id")[:HISTORY_SHOWN])
        self.stdout.write("history:" if entries else "history: none")
        rows = [
            (
                when(entry.time, now),
                entry.typ,
                entry.worker or "",
                "" if entry.progress is None else percent(entry.progress),
            )
            for entry in reversed(entries)
        ]
        for line in plain_table(("time", "event", "worker", "progress"), rows):
            self.stdout.write(f"  {line}")
        self.show_durable(task, now)
        if options["log"]:
            text = task.read_log()
            if text is None:
                why = logs.not_kept() or "no run of this task logged anything"
                self.stdout.write(f"log: none ({why})")
            else:
                self.stdout.write("log:")
                self.stdout.write(text, ending="" if text.endswith("\n") else "\n")

    def do_eta(self, options: dict[str, Any]) -> None:
        task = Task.objects.get_by_rn(options["rn"])
        what_if = WhatIf.parse(dict(options["what_if"]))
        forecast = task.forecast(what_if)
        if what_if:
            given = ", ".join(f"{k}={v}" for k, v in what_if.as_json().items())
            self.stdout.write(f"what if {given}:")
        self.stdout.write(f"{task.rn}: {forecast_line(forecast, forecast.now)}")
        if forecast.run_time is not None:
            measured = f"measured on {plural(forecast.samples, 'task')}" if forecast.samples else ""
            self.stdout.write(f"  run time {short(forecast.run_time)} {measured}".rstrip())
        for rule in forecast.rules:
            mark = "*" if rule == forecast.bottleneck else " "
            self.stdout.write(f"  {mark} {rule.detail}")

    def show_durable(self, task: Task, now: datetime) -> None:
        """The task's steps, cursor, waits and signals (docs/howto/durable.md), if any."""
        record = durable_record(task)
        if record["steps"]:
            self.stdout.write("steps:")
            rows = [
                (s.name, plural(s.size, "byte"), when(s.time, now), str(s.lease))
                for s in record["steps"]
            ]
            for line in plain_table(("name", "result", "time", "lease"), rows):
                self.stdout.write(f"  {line}")
        if record["cursor"] is not None:
            self.write_json("cursor", record["cursor"])
        if record["waits"]:
            self.stdout.write("waits:")
            waits = [
                (w.name, w.describe(), when(w.started, now), w.outcome or "waiting", str(w.lease))
                for w in record["waits"]
            ]
            for line in plain_table(("name", "waits for", "started", "outcome", "lease"), waits):
                self.stdout.write(f"  {line}")
        if record["signals"]:
            self.stdout.write("signals:")
            signals = [(g.name, when(g.time, now)) for g in record["signals"]]
            for line in plain_table(("name", "received"), signals):
                self.stdout.write(f"  {line}")

    def write_json(self, name: str, value: Any) -> None:
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
        self.stdout.write(f"{name}:")
        for line in text.splitlines():
            self.stdout.write(f"  {line}")

    # -- watching ---------------------------------------------------------------------------

    def do_watch(self, options: dict[str, Any]) -> None:
        interval = options["interval"].total_seconds()
        console = rich_console(self.stdout)
        try:
            if console is None:
                self.watch_plain(options, interval)
            else:
                self.watch_live(console, options, interval)
        except KeyboardInterrupt:
            self.stdout.write("")

    def running(self, options: dict[str, Any]) -> tuple[list[Task], int, int, datetime]:
        """The running tasks shown (oldest first), how many run and are ready, and now."""
        selected = self.selected(options)
        running = selected.filter(status=Status.RUNNING)
        tasks = list(
            running.defer("spec", "result", "errors").order_by("created", "id")[: options["limit"]]
        )
        count = len(tasks) if len(tasks) < options["limit"] else running.count()
        ready = selected.filter(status=Status.READY).count()
        return tasks, count, ready, read_clock(Task.objects.db)

    def watch_plain(self, options: dict[str, Any], interval: float) -> None:
        while True:
            tasks, running, ready, now = self.running(options)
            self.stdout.write(summary(running, ready, now))
            rows = [
                (t.rn, t.queue, t.owner or "", text_bar(t.progress), deadline(t, now))
                for t in tasks
            ]
            for line in plain_table(WATCH_COLUMNS, rows) if rows else []:
                self.stdout.write(line)
            self.stdout.flush()
            if options["once"]:
                return
            time.sleep(interval)
            self.stdout.write("")

    def watch_live(self, console: Any, options: dict[str, Any], interval: float) -> None:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        def bar(progress: float) -> Any:
            grid = Table.grid(padding=(0, 1))
            grid.add_row(ProgressBar(total=1.0, completed=progress, width=24), percent(progress))
            return grid

        def frame() -> Any:
            tasks, running, ready, now = self.running(options)
            rows = [
                (t.rn, t.queue, t.owner or "", bar(t.progress), deadline(t, now)) for t in tasks
            ]
            return rich_table(WATCH_COLUMNS, rows, title=summary(running, ready, now))

        if options["once"]:
            console.print(frame())
            return
        from rich.live import Live

        with Live(frame(), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(frame(), refresh=True)

    # -- operations -------------------------------------------------------------------------

    def do_cancel(self, options: dict[str, Any]) -> None:
        rns: list[str] = list(dict.fromkeys(options["rns"]))
        tasks = {t.rn: t for t in Task.objects.filter(rn__in=rns).defer("spec", "result")}
        unknown = [rn for rn in rns if rn not in tasks]
        if unknown:
            raise CommandError(f"No task has rn {', '.join(map(repr, unknown))}: none cancelled.")
        refused = []
        for rn in rns:
            try:
                tasks[rn].cancel()
            except ScyllaError as exc:
                refused.append(message(exc))
            else:
                self.stdout.write(f"cancelled {rn}")
        if refused:
            raise CommandError(" ".join(refused))

    def do_retry(self, options: dict[str, Any]) -> None:
        successor = Task.objects.get_by_rn(options["rn"]).retry()
        self.stdout.write(
            f"retried {options['rn']} as {successor.rn} (attempt {successor.attempt}, ready)"
        )

    def do_requeue(self, options: dict[str, Any]) -> None:
        task = Task.objects.get_by_rn(options["rn"])
        if task.status != Status.RUNNING or task.owner is None:
            raise CommandError(
                f"Task {task.rn} is {task.status}: only a running task whose worker is gone can "
                "be requeued (retry an aborted or cancelled one)."
            )
        owner = task.owner
        task.reset_lease(owner, task.leases)
        self.stdout.write(f"requeued {task.rn}: ready again ({owner} lost its lease)")

    def do_discard(self, options: dict[str, Any]) -> None:
        task = Task.objects.get_by_rn(options["rn"])
        if not Task.objects.filter(pk=task.pk).discard():
            raise InvalidTransition(
                f"Task {task.rn} is not a dead letter ({task.status}).",
                rn=task.rn,
                status=str(task.status),
            )
        self.stdout.write(f"discarded {task.rn}: aborted, no longer a dead letter")

    def each_task(self, options: dict[str, Any], verb: str, act: Any) -> None:
        """Apply `act(task)` to each task named by `options["rns"]`, in order; one refused
        does not stop the others, and the refusals end the command with an error."""
        rns: list[str] = list(dict.fromkeys(options["rns"]))
        tasks = {t.rn: t for t in Task.objects.filter(rn__in=rns).defer("spec", "result")}
        unknown = [rn for rn in rns if rn not in tasks]
        if unknown:
            raise CommandError(f"No task has rn {', '.join(map(repr, unknown))}: none {verb}.")
        refused = []
        for rn in rns:
            try:
                act(tasks[rn])
            except ScyllaError as exc:
                refused.append(message(exc))
            else:
                self.stdout.write(f"{verb} {rn}")
        if refused:
            raise CommandError(" ".join(refused))

    def do_pause(self, options: dict[str, Any]) -> None:
        self.each_task(options, "paused", lambda task: task.pause(by=operator()))

    def do_resume(self, options: dict[str, Any]) -> None:
        self.each_task(options, "resumed", lambda task: task.resume())

    def do_delete(self, options: dict[str, Any]) -> None:
        task = Task.objects.get_by_rn(options["rn"])
        record = task.delete_ready(by=operator())
        kept = plural(len(record.history), "History row")
        self.stdout.write(f"deleted {record.rn} (queue {record.queue}); its record keeps {kept}")

    def do_release_order(self, options: dict[str, Any]) -> None:
        task = Task.objects.get_by_rn(options["rn"])
        key_control.release_order(task)
        self.stdout.write(
            f"released the order key {task.order_key} held by {task.rn}: its later tasks may run"
        )


def operator() -> str | None:
    """Who runs the command, as the records of a hold or a deletion name them: the login of
    the shell's user, if known."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def message(exc: Exception) -> str:
    """The words of a refusal or a validation error."""
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return str(exc)


def first_error(task: Task) -> str:
    """The code of the first error a task recorded, or ""."""
    errors = task.errors or []
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    return str(first.get("code", ""))


def when(moment: datetime | None, now: datetime) -> str:
    """A moment, in UTC to the second, and how long ago it was: `2026-01-02 10:00:00 (3 s ago)`."""
    if moment is None:
        return ""
    return f"{moment:%Y-%m-%d %H:%M:%S} ({ago(moment, now)})"


def deadline(task: Task, now: datetime) -> str:
    """When a running task's lease ends, relative to now ("in 8 s", "2 s ago": expired)."""
    return ago(task.deadline, now) if task.deadline else ""


def summary(running: int, ready: int, now: datetime) -> str:
    """The line above the bars: `3 tasks running, 12 ready (19:30:01 UTC)`."""
    return f"{plural(running, 'task')} running, {ready:,} ready ({now:%H:%M:%S} UTC)"
