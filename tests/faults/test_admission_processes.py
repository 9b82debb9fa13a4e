"""Caps on ready tasks under real concurrency: 8 processes submit to capped queues at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

from scylla_django.enums import Status
from scylla_django.models import QueueSetting, Task
from scylla_django.models.admission import SHED
from tests.processes import reports, start_together

pytestmark = [
    pytest.mark.concurrency,
    pytest.mark.django_db(transaction=True),
]

PROCESSES = 8
EACH = 10
CAP = 20


def submit_at_once(tmp_path: Path, jobs: list[str]) -> list[dict[str, dict[str, int]]]:
    """Start PROCESSES children that each submit EACH tasks per job at the same moment
    (`tests.admission_child`); their reports."""
    assert not connection.in_atomic_block  # autocommit: the children see each other's commits
    children = start_together(
        tmp_path, PROCESSES, "tests.admission_child", str(EACH), after=tuple(jobs)
    )
    return reports(children)


def test_caps_hold_under_concurrent_submitters(tmp_path: Path) -> None:
    """8 processes submit 10 tasks each, at once, to each of three queues capped at 20
    ready tasks: one at a time refused when full, in bulk refused when full, one at a time
    shedding the oldest. Exactly 20 go into the first two (the others are refused, never
    one over the cap); all 80 go into the third, and exactly the 60 oldest are cancelled with
    the code `shed`."""
    QueueSetting.objects.cap("one", CAP)
    QueueSetting.objects.cap("bulk", CAP)
    QueueSetting.objects.cap("shedding", CAP, on_full="shed_oldest")
    reports = submit_at_once(
        tmp_path, ["one:reject:one", "bulk:reject:bulk", "shedding:shed_oldest:one"]
    )
    total = PROCESSES * EACH
    for queue in ("one", "bulk"):
        assert sum(r[queue]["inserted"] for r in reports) == CAP, queue
        assert sum(r[queue]["full"] for r in reports) == total - CAP, queue
        assert Task.objects.filter(queue=queue).count() == CAP, queue

    assert sum(r["shedding"]["inserted"] for r in reports) == total
    tasks = Task.objects.filter(queue="shedding")
    assert tasks.filter(status=Status.READY).count() == CAP
    shed = tasks.filter(status=Status.CANCELLED)
    assert shed.count() == total - CAP
    assert all(errors[-1]["code"] == SHED for errors in shed.values_list("errors", flat=True))
    # The oldest went: every task still ready was submitted after every one shed.
    newest_shed = max(shed.values_list("created", flat=True))
    assert min(tasks.filter(status=Status.READY).values_list("created", flat=True)) >= newest_shed
