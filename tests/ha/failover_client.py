"""A client that submits through a failover (tests/ha/test_failover.py), run by
`manage.py shell -c` on the multi-host DSN: one task at a time until the file `stop` exists,
each acknowledged one written to `acks` ("<rn> <time>") only once `submit()` returned, each
failure's time to `failures`.

A submission that fails (the primary is gone) is retried with the same rn on a new connection:
DuplicateTask then says that the failed one had committed, which is an acknowledgement too.
"""

from __future__ import annotations

import os
import time

from django.db import DatabaseError, connection

from scylla_django.exceptions import DuplicateTask
from scylla_django.models import Task


def main(folder: str) -> None:
    acks = os.path.join(folder, "acks")
    stop = os.path.join(folder, "stop")
    n = 0
    with open(acks, "a") as out:
        while not os.path.exists(stop):
            rn = f"s-{n}"
            try:
                Task.objects.submit(
                    "f-work", {"path": os.path.join(folder, "runs"), "seconds": 0.3}, rn=rn
                )
            except DuplicateTask:
                pass
            except DatabaseError:
                with open(os.path.join(folder, "failures"), "a") as failures:
                    failures.write(f"{time.time()}\n")
                connection.close()  # the next statement connects again, to the new primary
                time.sleep(0.05)
                continue
            out.write(f"{rn} {time.time()}\n")
            out.flush()
            n += 1
            time.sleep(0.02)
