"""Subprocess entry point of `test_concurrency.test_lease_is_exclusive_across_processes`.

    python -m tests.lease_child QUEUE READY_FILE GO_FILE [reconnect]

DJANGO_SETTINGS_MODULE and DATABASE_URL come from the environment. The child registers a worker,
creates READY_FILE, waits for GO_FILE to appear (so that every child starts leasing at the same
moment), then leases up to `LIMIT` tasks at a time until several calls in a row return nothing.
It prints one JSON object on stdout: `{"worker": name, "batches": [[pk, ...], ...]}`. With
`reconnect`, it closes its connection before each lease (as a worker does between tasks), so the
connection is opened inside the lease's transaction block.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

LIMIT = 5
EMPTY_CALLS_TO_STOP = 3
START_TIMEOUT = 60.0


def main(queue: str, ready_file: Path, go_file: Path, reconnect: bool = False) -> int:
    import django

    django.setup()

    from django.db import connection

    from scylla_django.models import Task, Worker

    try:
        worker = Worker.objects.register(queues=[queue], capacity=LIMIT, pid=os.getpid())
        ready_file.touch()
        give_up = time.monotonic() + START_TIMEOUT
        while not go_file.exists():
            if time.monotonic() > give_up:
                print("the go file never appeared", file=sys.stderr)
                return 2
            time.sleep(0.002)

        batches: list[list[int]] = []
        empty = 0
        while empty < EMPTY_CALLS_TO_STOP:
            if reconnect:
                connection.close()
            leased = Task.objects.lease(worker, [queue], limit=LIMIT, lease_length=300)
            if leased:
                empty = 0
                batches.append([task.pk for task in leased])
                time.sleep(0.001)  # let the other process in, so that both get a share
            else:
                empty += 1
        json.dump({"worker": worker.name, "batches": batches}, sys.stdout)
        return 0
    finally:
        connection.close()


if __name__ == "__main__":
    reconnect = sys.argv[4:] == ["reconnect"]
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), reconnect))
