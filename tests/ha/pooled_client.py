"""A client of the task table through whatever DATABASE_URL names (a pooler, in tests/ha):
submits, keys, follow-ups and cancellations, run by `manage.py shell -c` in a child process.

It prints one JSON line, "RESULT {...}", with what it saw.
"""

from __future__ import annotations

import json
import time

from django.db import connection

from scylla_django.db.prepared import prepares
from scylla_django.enums import Status
from scylla_django.exceptions import DuplicateKey
from scylla_django.models import Task


def main() -> None:
    outcomes = Task.objects.submit_many(
        {"queue": "t-echo", "spec": {"n": n}, "rn": f"echo-{n}"} for n in range(200)
    )
    duplicates = 0
    for n in range(10):
        Task.objects.submit("t-echo", {"key": n}, unique_key=f"k{n}", unique_window="1h")
        try:
            Task.objects.submit(
                "t-echo", {"key": n}, unique_key=f"k{n}", unique_window="1h", on_conflict="raise"
            )
        except DuplicateKey:
            duplicates += 1
    for n in range(10):
        Task.objects.submit("t-echo", {"ordered": n}, rn=f"ordered-{n}", order_key="o")
    Task.objects.submit("t-echo", {"first": True}, rn="parent")
    Task.objects.submit("t-echo", {"then": True}, rn="child", after=["parent"])
    sleepers = [
        Task.objects.submit("t-sleep", {"seconds": 60}, rn=f"sleeper-{n}").rn for n in range(3)
    ]
    deadline = time.monotonic() + 20
    while Task.objects.filter(rn__in=sleepers, status=Status.RUNNING).count() < 3:
        if time.monotonic() > deadline:
            raise AssertionError("the sleepers did not start")
        time.sleep(0.05)
    time.sleep(0.5)  # a heartbeat or two with progress
    progressed = Task.objects.filter(rn__in=sleepers, progress__gt=0).count()
    cancelled = Task.objects.filter(rn__in=sleepers).cancel()
    print(
        "RESULT "
        + json.dumps(
            {
                "inserted": sum(1 for o in outcomes if o.outcome == "inserted"),
                "duplicates": duplicates,
                "progressed": progressed,
                "cancelled": cancelled,
                "prepares": prepares(connection),
            }
        ),
        flush=True,
    )
