"""Throughput of the core operations: submit, lease + complete, reset, purge.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/scylla_bench python benchmarks/core.py
    python benchmarks/core.py --tasks 20000 --threads 4        # SQLite file by default

The database is migrated and emptied first: point DATABASE_URL at a scratch database.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("DATABASE_URL", f"sqlite:///{ROOT / 'bench.sqlite3'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--threads", type=int, default=8, help="concurrent lessees")
    parser.add_argument("--limit", type=int, default=10, help="tasks per lease call")
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.db.models.functions import Now

    from scylla_django.models import History, Task, Worker

    call_command("migrate", verbosity=0)
    History.objects.all().delete()
    Task.objects.all().delete()
    print(f"{connection.vendor}, {args.tasks} tasks, {args.threads} lessees, limit {args.limit}")

    started = time.perf_counter()
    for chunk in range(0, args.tasks, 1000):
        Task.objects.submit_many(
            {"queue": f"q{n % 4}", "spec": {"n": n}, "priority": n % 7}
            for n in range(chunk, min(args.tasks, chunk + 1000))
        )
    report("submit_many (1,000 per call)", args.tasks, time.perf_counter() - started)

    done = [0] * args.threads

    def lessee(index: int) -> None:
        worker = Worker.objects.register(["q0", "q1", "q2", "q3"], args.limit)
        queues = ["q0", "q1", "q2", "q3"]
        try:
            while tasks := Task.objects.lease(worker, queues, limit=args.limit, lease_length=60):
                for task in tasks:
                    task.complete(worker, {"ok": True})
                done[index] += len(tasks)
        finally:
            connection.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=lessee, args=(i,)) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    assert sum(done) == args.tasks, (sum(done), args.tasks)
    report("lease + complete, end to end", args.tasks, elapsed)

    worker = Worker.objects.register(["r"], 1)
    Task.objects.submit_many({"queue": "r", "spec": n} for n in range(min(args.tasks, 10_000)))
    leased = len(Task.objects.lease(worker, ["r"], limit=10_000, lease_length=60))
    Task.objects.filter(status="running").update(deadline=Now() - timedelta(seconds=1))
    started = time.perf_counter()
    reset = Task.objects.reset_expired()
    assert reset == leased
    report("reset_expired", reset, time.perf_counter() - started)

    Task.objects.update(updated=Now() - timedelta(days=30))
    eligible = Task.objects.purgeable(timedelta(days=1)).count()
    started = time.perf_counter()
    purged = Task.objects.purge(timedelta(days=1))
    assert purged == eligible
    report("purge (batches of 1,000)", purged, time.perf_counter() - started)


def report(what: str, count: int, seconds: float) -> None:
    print(f"  {what:<32} {count:>8} in {seconds:7.2f} s = {count / seconds:>9,.0f} /s")


if __name__ == "__main__":
    main()
