"""The trigger examples of docs/howto/triggers.md run as written and do what their comments
say (the settings block and the emitting block are read from the page itself)."""

from __future__ import annotations

import ast
import re
from datetime import timedelta

import pytest

from scylla_django import db
from scylla_django.models import Firing, Task, Worker
from scylla_django.monitor import Monitor
from tests.docs import page

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = page("howto/triggers.md")
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def documented_blocks() -> tuple[dict, str]:
    settings_block, code = BLOCK.findall(PAGE.read_text())[:2]
    scylla = ast.literal_eval(settings_block.strip().removeprefix("SCYLLA = "))
    return scylla, code


def tasks(queue: str) -> list[Task]:
    return list(Task.objects.filter(queue=queue).order_by("id"))


def test_the_documented_trigger_cases_do_what_they_say(settings) -> None:
    scylla, code = documented_blocks()
    settings.SCYLLA = scylla
    clock = {"now": None}
    monitor = Monitor(interval=60, clock=lambda: clock["now"] or db.read_clock("default"))
    passes = [monitor.schedules, monitor.triggers]
    monitor.run_once(passes)  # sync the settings; the task events start here
    exec(compile(code, str(PAGE), "exec"), {})
    monitor.run_once(passes)

    [load] = tasks("load")  # data arrival: one load, its event in the spec
    assert load.spec["job"] == "sales"
    assert [e["payload"]["dataset"] for e in load.spec["events"]] == ["sales"]
    [compact] = tasks("compact")  # N partitions: one compaction for the 4
    assert tasks("merge") == []  # quiet: the chunk is seconds old
    assert tasks("report") == []  # A then B: the load has not completed
    assert tasks("publish") == []  # delay: 10 minutes after the 4th partition
    [delayed] = Firing.objects.filter(schedule__name="publish", outcome="delayed")
    assert len(delayed.consumptions.all()) == 4

    worker = Worker.objects.register(queues=["load"], capacity=1, hostname="t", pid=1)
    [leased] = Task.objects.lease(worker, ["load"], limit=1)
    leased.complete(worker)
    monitor.run_once(passes)
    [report] = tasks("report")
    assert report.queue == "report"

    clock["now"] = db.read_clock("default") + timedelta(minutes=11)
    monitor.run_once(passes)
    assert len(tasks("merge")) == 1
    [publish] = tasks("publish")
    assert publish.rn == delayed.rn
    monitor.run_once(passes)  # nothing new: each case fired exactly once
    assert len(Task.objects.filter(rn__startswith="schedule:")) == 5
    assert compact.rn.startswith("schedule:compact:e")
