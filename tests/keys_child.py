"""Subprocess entry point of `test_lease_keys_concurrency`: a lessee of keyed tasks.

    python -m tests.keys_child QUEUE READY_FILE GO_FILE SECONDS [hold | at-least=N]

DJANGO_SETTINGS_MODULE and DATABASE_URL come from the environment. The child registers a worker,
creates READY_FILE, waits for GO_FILE, then for SECONDS leases up to 3 tasks at a time and
finishes them (completes most, aborts some) after a short pause. It prints one JSON object:
`{"leased": n}`. With `at-least=N` it goes on past SECONDS until it has leased N tasks or
START_TIMEOUT has passed, so a busy machine slows the test down instead of starving it. With
`hold`, it leases once and then sleeps, holding its keys until killed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

LIMIT = 3
START_TIMEOUT = 60.0


def main(
    queue: str, ready_file: Path, go_file: Path, seconds: float, hold: bool, at_least: int
) -> int:
    import django

    django.setup()

    from django.db import connection

    from scylla_django.models import Outcome, Task, Worker

    try:
        worker = Worker.objects.register(queues=[queue], capacity=LIMIT, pid=os.getpid())
        ready_file.touch()
        give_up = time.monotonic() + START_TIMEOUT
        while not go_file.exists():
            if time.monotonic() > give_up:
                print("the go file never appeared", file=sys.stderr)
                return 2
            time.sleep(0.002)
        if hold:
            leased = Task.objects.lease(worker, [queue], limit=LIMIT, lease_length=300)
            print(json.dumps({"leased": [t.pk for t in leased]}), flush=True)
            time.sleep(600)
            return 0
        count = 0
        start = time.monotonic()
        end, last = start + seconds, start + max(seconds, START_TIMEOUT)
        while time.monotonic() < end or (count < at_least and time.monotonic() < last):
            leased = Task.objects.lease(worker, [queue], limit=LIMIT, lease_length=300)
            count += len(leased)
            time.sleep(0.002)
            outcomes = [
                Outcome(pk=t.pk, lease=t.leases)
                if t.pk % 5
                else Outcome(pk=t.pk, lease=t.leases, errors=[{"code": "failed"}])
                for t in leased
            ]
            if outcomes:
                Task.objects.finish_many(worker, outcomes)
        print(json.dumps({"leased": count}))
        return 0
    finally:
        connection.close()


if __name__ == "__main__":
    extra = sys.argv[5:]
    hold = extra == ["hold"]
    at_least = int(extra[0].removeprefix("at-least=")) if extra and not hold else 0
    ready, go = Path(sys.argv[2]), Path(sys.argv[3])
    sys.exit(main(sys.argv[1], ready, go, float(sys.argv[4]), hold, at_least))
