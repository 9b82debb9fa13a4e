"""Time the monitor's trigger pass over many schedules with triggers, on PostgreSQL.

    PYTHONPATH=. python benchmarks/triggers.py [--schedules 5000] [--events 2000] [--passes 4]

Creates `--schedules` schedules with triggers (a mix of on_event with a match, count, quiet,
all/any and on_task) in the database named by DATABASE_URL (default postgres://postgres@
127.0.0.1:5432/scylla_bench_triggers, created if missing; its schedules and events are
replaced at every run). Then it times passes of `firings.fire()` as a monitor makes them
(`firings.Sweep`): a full pass with no event, an incremental pass with no event, an incremental
pass after `--events` events spread over the schedules' kinds, then a full pass. `--passes N`
makes only the first N of these four passes (1: the full pass with no event alone).
"""

from __future__ import annotations

import argparse
import time

import postgres  # benchmarks/postgres.py, beside this script

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/scylla_bench_triggers"
KINDS = 50


def trigger(n: int) -> dict:
    kind = f"partition.added.{n % KINDS}"
    match = {"dataset": f"d{n % 7}"}
    return [
        {"on_event": kind, "match": match},
        {"on_event": kind, "match": match, "count": 4},
        {"on_event": kind, "quiet": "10m"},
        {"all": [{"on_event": kind}, {"on_task": f"q{n % KINDS}"}], "window": "1h"},
        {"any": [{"on_event": kind, "match": match}, {"on_task": f"q{n % KINDS}"}]},
    ][n % 5]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=5000)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--passes", type=int, choices=range(1, 5), default=4)
    args = parser.parse_args()
    postgres.setup(parser, DEFAULT_URL)
    postgres.print_machine()

    from scylla_django import events
    from scylla_django.models import Consumption, Event, Firing, Schedule, Task
    from scylla_django.schedules.firings import Sweep, fire

    Consumption.objects.all().delete()
    Firing.objects.all().delete()
    Event.objects.all().delete()
    Schedule.objects.all().delete()
    Task.objects.filter(rn__startswith="schedule:").delete()
    Schedule.objects.bulk_create(
        Schedule(name=f"s{n}", queue="q", trigger=trigger(n)) for n in range(args.schedules)
    )

    sweep = Sweep(full_every=3600)

    def timed(what: str, full: bool = False) -> None:
        began = time.perf_counter()
        kinds = sweep.kinds("default", time.monotonic())  # None the first time: a full pass
        fired = fire(kinds=None if full else kinds)
        took = time.perf_counter() - began
        print(f"{what}: {took:.2f} s for {args.schedules} schedules, {len(fired)} firings")

    timed("full pass, no event", full=True)
    if args.passes >= 2:
        timed("incremental pass, no event")
    if args.passes >= 3:
        for n in range(args.events):
            events.emit(f"partition.added.{n % KINDS}", {"dataset": f"d{n % 7}"})
        timed(f"incremental pass after {args.events} events")
    if args.passes >= 4:
        timed("full pass after", full=True)


if __name__ == "__main__":
    main()
