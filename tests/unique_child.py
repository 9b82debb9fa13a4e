"""Subprocess entry point of `test_unique_keys_processes.test_concurrent_submits_of_one_key`.

    python -m tests.unique_child KEY READY_FILE GO_FILE

DJANGO_SETTINGS_MODULE and DATABASE_URL come from the environment. The child opens its
connection, creates READY_FILE, waits for GO_FILE to appear (so that every child submits at the
same moment), submits one task with the unique key KEY (`on_conflict="return"`) and prints one
JSON object on stdout: `{"rn": rn of the task returned, "outcome": its submit_outcome}`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

START_TIMEOUT = 60.0


def main(key: str, ready_file: Path, go_file: Path) -> int:
    import django

    django.setup()

    from django.db import connection

    from scylla_django.models import Task

    connection.ensure_connection()
    ready_file.touch()
    give_up = time.monotonic() + START_TIMEOUT
    while not go_file.exists():
        if time.monotonic() > give_up:
            print("the go file never appeared", file=sys.stderr)
            return 2
        time.sleep(0.002)
    task = Task.objects.submit("unique", {"pid": os.getpid()}, unique_key=key)
    print(json.dumps({"rn": task.rn, "outcome": task.submit_outcome}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
