"""Subprocess entry point of `test_lease_keys_concurrency`: a lessee of keyed tasks.

    python -m tests.keys_child QUEUE READY_FILE GO_FILE SECONDS [hold]

DJANGO_SETTINGS_MODULE and DATABASE_URL come from the environment. The child registers a worker,
creates READY_FILE, waits for GO_FILE, then for SECONDS leases up to 3 tasks at a time and
finishes them (completes most, aborts some) after a short pause. It prints one JSON object:
`{"leased": n}`. With `hold`, it leases once and then sleeps, holding its keys until killed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

LIMIT = 3
START_TIMEOUT = 60.0


def main(queue: str, ready_file: Path, go_file: Path, seconds: float, hold: bool) -> int:
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
        end = time.monotonic() + seconds
        while time.monotonic() < end:
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
    hold = sys.argv[5:] == ["hold"]
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4]), hold))
