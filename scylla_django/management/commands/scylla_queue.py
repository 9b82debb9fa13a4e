"""`manage.py scylla_queue`: pause, resume, limit, cap and list queues."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count, Q

from ...db import Now, due
from ...enums import Status
from ...models import AFTER_PARENTS, QueueSetting, Task
from ...models.queues import QUEUE_ON_FULL
from ..base import COMMAND_CHECKS, non_negative_int, queue_name, reader_may_leave


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Pause a queue (no task of it is leased; submissions still go in), resume it, set or "
        "clear its limit on running tasks across all workers, set or clear its cap on ready "
        "tasks (admission control), or list the queues with their settings. Changes apply to "
        "the next lease (or submission) everywhere."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="operation", required=True, metavar="OPERATION")
        for operation, text in (("pause", "Stop leasing QUEUE."), ("resume", "Lease QUEUE again.")):
            sub = commands.add_parser(operation, help=text, description=text)
            sub.add_argument("queue", type=queue_name, metavar="QUEUE")
        limit = commands.add_parser(
            "limit",
            help="Run at most N tasks of QUEUE at once (--none: no limit).",
            description="Run at most N tasks of QUEUE at once, across all workers.",
        )
        limit.add_argument("queue", type=queue_name, metavar="QUEUE")
        group = limit.add_mutually_exclusive_group(required=True)
        group.add_argument(
            "max_running",
            type=non_negative_int,
            nargs="?",
            metavar="N",
            help="1 or more (0 is refused: pause the queue instead).",
        )
        group.add_argument("--none", action="store_true", help="Remove the limit.")
        cap = commands.add_parser(
            "cap",
            help="Let at most N tasks of QUEUE wait ready (--none: no cap).",
            description=(
                "Let at most N tasks of QUEUE wait ready: a submission to the full queue is "
                "refused (QueueFull, HTTP 429) or, with --on-full shed_oldest, cancels the "
                "oldest ready task (error code shed)."
            ),
        )
        cap.add_argument("queue", type=queue_name, metavar="QUEUE")
        capped = cap.add_mutually_exclusive_group(required=True)
        capped.add_argument(
            "max_ready", type=non_negative_int, nargs="?", metavar="N", help="1 or more."
        )
        capped.add_argument("--none", action="store_true", help="Remove the cap.")
        cap.add_argument(
            "--on-full",
            choices=QUEUE_ON_FULL,
            default="reject",
            help="What a submission to the full queue does (default: %(default)s).",
        )
        commands.add_parser(
            "list",
            help="Queues with tasks or settings, and whether each is paused or limited.",
            description="Queues with tasks or settings, and whether each is paused or limited.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        operation = options["operation"]
        if operation == "list":
            with reader_may_leave():
                self.list_queues()
            return
        queue = options["queue"]
        try:
            if operation == "pause":
                setting = QueueSetting.objects.pause(queue)
            elif operation == "resume":
                setting = QueueSetting.objects.resume(queue)
            elif operation == "cap":
                most = None if options["none"] else options["max_ready"]
                if most == 0:
                    raise CommandError(
                        f"A cap of 0 would refuse every task of {queue}; "
                        f"`scylla_queue cap {queue} --none` removes the cap."
                    )
                setting = QueueSetting.objects.cap(queue, most, options["on_full"])
            else:
                most = None if options["none"] else options["max_running"]
                if most == 0:
                    raise CommandError(
                        f"A limit of 0 would run no task of {queue}: to stop leasing it, use "
                        f"`scylla_queue pause {queue}` (and `scylla_queue resume {queue}` to "
                        f"start again); `scylla_queue limit {queue} --none` removes the limit."
                    )
                setting = QueueSetting.objects.limit(queue, most)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        self.stdout.write(str(setting))

    def list_queues(self) -> None:
        """Each queue with ready tasks or settings: paused or active, its ready tasks split
        into those leasable now, the follow-ups waiting for their parents and those whose
        `not_before` is ahead, and its limit. One query over the ready tasks."""
        settings = {s.queue: s for s in QueueSetting.objects.all()}
        counts: dict[str, dict[str, Any]] = {
            row["queue"]: dict(row)
            for row in Task.objects.filter(status=Status.READY)
            .order_by()
            .values("queue")
            .annotate(
                ready=Count("id", filter=due()),
                held=Count("id", filter=Q(not_before=AFTER_PARENTS)),
                scheduled=Count(
                    "id", filter=Q(not_before__gt=Now()) & ~Q(not_before=AFTER_PARENTS)
                ),
            )
        }
        names = sorted({*settings, *counts})
        if not names:
            self.stdout.write("No queue has ready tasks or settings.")
            return
        width = max(len(name) for name in names)
        for name in names:
            setting = settings.get(name) or QueueSetting(queue=name)
            state = "paused" if setting.paused else "active"
            row = counts.get(name, {})
            line = f"{name:<{width}}  {state:<6}  {row.get('ready', 0):>8} ready"
            if row.get("held"):
                line += f"  {row['held']} waiting for parents"
            if row.get("scheduled"):
                line += f"  {row['scheduled']} scheduled"
            if setting.max_running:
                line += f"  max_running={setting.max_running}"
            if setting.max_ready:
                line += f"  max_ready={setting.max_ready} ({setting.on_full})"
            self.stdout.write(line)
