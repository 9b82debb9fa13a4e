"""The ORM's finish (SQLite, MySQL/MariaDB): the outcomes of a worker's leases, each a
conditional UPDATE fenced on its lease, then their History rows and their batches' counters, in
one write transaction (PostgreSQL's is one statement: `postgresql.postgresql_finish`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..enums import EventType, Status
from .clock import read_clock
from .tables import Tables
from .tallies import count_finished
from .transactions import write_atomic


def portable_finish(
    tables: Tables, using: str, worker: str, rows: Sequence[dict[str, Any]]
) -> dict[int, datetime]:
    """One conditional UPDATE per lease, then the History rows and the batches'
    counters, in one write transaction."""
    manager = tables.task._default_manager.using(using)
    done: dict[int, datetime] = {}
    with write_atomic(using):
        now = read_clock(using)
        for row in rows:
            completed = row["status"] == Status.COMPLETED
            values: dict[str, Any] = {
                "status": row["status"],
                "deadline": None,
                "cpu_time": row.get("cpu_time"),
                "peak_memory": row.get("peak_memory"),
            }
            if row.get("log"):
                values["log"] = row["log"]
            if completed:
                values.update(progress=1.0, result=row["result"])
            else:
                values["errors"] = row["errors"]
            fenced = manager.filter(
                pk=row["id"], status=Status.RUNNING, owner=worker, leases=row["lease"]
            )
            if fenced.update(updated=now, **values):
                done[row["id"]] = now
        events = {Status.COMPLETED: EventType.COMPLETION, Status.ABORTED: EventType.ABORT}
        written = list(
            manager.filter(pk__in=done).values_list("pk", "status", "progress", "batch_id")
        )
        tables.history._default_manager.using(using).bulk_create(
            tables.history(
                task_id=pk,
                typ=events[Status(status)],
                worker=worker,
                progress=progress,
                time=now,
            )
            for pk, status, progress, _ in written
        )
        count_finished(
            tables.batch,
            using,
            [
                {"batch_id": batch, "status": status}
                for _, status, _, batch in written
                if status == Status.COMPLETED
            ],
        )
    return done
