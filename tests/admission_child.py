"""Subprocess entry point of `test_admission_processes`.

    python -m tests.admission_child COUNT READY_FILE GO_FILE QUEUE:ON_FULL:HOW ...

DJANGO_SETTINGS_MODULE and DATABASE_URL come from the environment. The child opens its
connection, creates READY_FILE, waits for GO_FILE to appear (so that every child submits at the
same moment), then for each QUEUE:ON_FULL:HOW submits COUNT tasks to QUEUE with
`on_full=ON_FULL` (HOW: "one" at a time, or in one `submit_many` with "bulk"), and prints one
JSON object on stdout: per queue, how many went in and how many were refused,
`{"QUEUE": {"inserted": n, "full": m}}`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

START_TIMEOUT = 60.0


def main(count: int, ready_file: Path, go_file: Path, jobs: list[str]) -> int:
    import django

    django.setup()

    from django.db import connection

    from scylla_django.exceptions import QueueFull
    from scylla_django.models import Task

    connection.ensure_connection()
    ready_file.touch()
    give_up = time.monotonic() + START_TIMEOUT
    while not go_file.exists():
        if time.monotonic() > give_up:
            print("the go file never appeared", file=sys.stderr)
            return 2
        time.sleep(0.002)
    report = {}
    for job in jobs:
        queue, on_full, how = job.split(":")
        counts = report[queue] = {"inserted": 0, "full": 0}
        if how == "bulk":
            items = [{"queue": queue, "spec": {"n": i}, "on_full": on_full} for i in range(count)]
            for outcome in Task.objects.submit_many(items):
                counts[outcome.outcome] += 1
            continue
        for i in range(count):
            try:
                Task.objects.submit(queue, {"n": i}, on_full=on_full)
            except QueueFull:
                counts["full"] += 1
            else:
                counts["inserted"] += 1
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]))
