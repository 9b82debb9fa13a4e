"""Prepare the example project: an admin user and a batch of demo tasks."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Count
from django.utils import timezone

from scylla_django.models import Task

QUEUES = {
    "reports": lambda n: {"report": "daily-sales", "day": n % 28 + 1, "parts": 5},
    "emails": lambda n: {"to": f"user{n}@example.{'org' if n % 4 == 0 else 'com'}"},
    "flaky": lambda n: {"fail_ratio": 0.3, "n": n},
}


class Command(BaseCommand):
    help = "Create the admin user (admin/admin) if missing and submit demo tasks."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tasks", type=int, default=30, help="tasks to submit (default 30)")
        parser.add_argument("--username", default="admin", help="admin user (default admin)")
        parser.add_argument("--password", default="admin", help="its password (default admin)")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if not users.objects.filter(username=options["username"]).exists():
            users.objects.create_superuser(options["username"], "", options["password"])
            self.stdout.write(f"Created superuser {options['username']!r}.")
        rng = random.Random(7)
        items = []
        for n in range(options["tasks"]):
            queue = list(QUEUES)[n % len(QUEUES)]
            item: dict[str, Any] = {
                "rn": f"demo-{n}",  # a second run submits nothing new
                "queue": queue,
                "spec": QUEUES[queue](n),
                "priority": rng.choice([0, 0, 10, 50, 200]),
            }
            if n % 10 == 9:
                item["not_before"] = timezone.now() + timedelta(minutes=2)
            items.append(item)
        outcomes = Task.objects.submit_many(items)
        inserted = sum(o.outcome == "inserted" for o in outcomes)
        existing = sum(o.outcome == "duplicate" for o in outcomes)
        self.stdout.write(f"Submitted {inserted} demo tasks ({existing} were already there).")
        for row in Task.objects.order_by().values("queue", "status").annotate(n=Count("id")):
            self.stdout.write(f"  {row['queue']:<10} {row['status']:<10} {row['n']}")
