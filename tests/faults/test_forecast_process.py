"""The start forecast against a real worker process: tasks behind a limit in a steady run.

30 tasks of about a second each share the limit "stripe" of size 2, and one worker with four
slots runs them. Once six have completed (the run times are measured), every task still
ready is forecast; when all have run, each forecast wait is compared with the wait the task
really had (from the forecast's moment to its lease, on the database clock). The median
error must stay under 25 %; the figure is printed (`-s`).
"""

from __future__ import annotations

import signal
import statistics

import pytest

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from scylla_django.models.key_control import set_limit
from tests.processes import finish, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

TASKS = 30
WARM_UP = 6


@pytest.mark.keys  # limits and admission keys: not on MySQL/MariaDB
def test_forecasts_of_tasks_behind_a_limit_match_their_starts():
    set_limit("stripe", 2)
    rns = [
        Task.objects.submit("t-sleep", {"seconds": 1.0}, rn=f"s{i:02}", limits=["stripe"]).rn
        for i in range(TASKS)
    ]
    worker = start(
        "scylla_worker",
        "--queue=t-sleep",
        "--concurrency=4",
        "--poll-interval=0.1",
        "--handlers=tests.worker_handlers",
    )
    try:
        completed = Task.objects.filter(rn__in=rns, status=Status.COMPLETED)
        wait_until(lambda: completed.count() >= WARM_UP, what=f"{WARM_UP} completed tasks")
        forecasts = [
            task.forecast() for task in Task.objects.filter(rn__in=rns, status=Status.READY)
        ]
        wait_until(lambda: completed.count() == TASKS, what="every task completed")
    finally:
        worker.send_signal(signal.SIGTERM)
        code, output = finish(worker)
    assert code == 0, output
    assert len(forecasts) >= TASKS - WARM_UP - 4  # most were still waiting when forecast
    errors = []
    for forecast in forecasts:
        assert forecast.wait is not None, forecast.detail
        if forecast.wait > 0:  # else a place was free as it was forecast
            assert forecast.bottleneck is not None, forecast.detail
            assert (forecast.bottleneck.kind, forecast.bottleneck.name) == ("limit", "stripe")
        started = (
            History.objects.filter(task__rn=forecast.rn, typ=EventType.ASSIGNMENT)
            .order_by("id")
            .values_list("time", flat=True)
            .first()
        )
        assert started is not None
        actual = (started - forecast.now).total_seconds()
        if actual > 0.2:  # one that started as it was forecast says little of the error
            errors.append(abs(forecast.wait - actual) / actual)
    assert len(errors) >= 8
    median = statistics.median(errors)
    print(f"\nforecast median error {median:.1%} over {len(errors)} tasks behind limit stripe")
    assert median < 0.25, f"median error {median:.1%}"
