"""A schedule's `max_load` run constraint (CDAP's cluster-load constraint): a firing waits
while every live worker of the schedule's queue reports a host load over it, and is released
once one reports a load at or under it; shown in "why has it not fired?"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from scylla_django.models import Schedule, Task, Worker
from scylla_django.schedules import clean_definition, next_tick, release, tick
from scylla_django.schedules.constraints import why

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 6, 1, tzinfo=UTC)


def make(**raw) -> Schedule:
    definition = clean_definition("compaction", {"queue": "default", "every": "10m", **raw})
    return Schedule.objects.create(
        name="compaction", next_run=next_tick(definition, T0), **definition.fields()
    )


def test_a_firing_waits_while_the_queue_s_workers_are_loaded(worker, other_worker):
    make(max_load=3.5)
    worker.touch(load=6.0)
    other_worker.touch(load=4.2)
    [waiting] = tick(now=T0 + timedelta(minutes=10))
    assert waiting.outcome == "waiting"
    [unmet] = why(Schedule.objects.get(), T0 + timedelta(minutes=11))
    assert unmet.code == "max_load"
    assert "the least load is 4.20, max_load is 3.5" in unmet.detail
    assert not Task.objects.exists()
    other_worker.touch(load=1.5)
    [released] = release(now=T0 + timedelta(minutes=12))
    assert released.outcome == "submitted"
    assert Task.objects.count() == 1


def test_no_reporting_worker_holds_nothing_back(worker):
    make(max_load=1.0)
    Worker.objects.filter(pk=worker.pk).update(load=None)
    assert why(Schedule.objects.get(), T0) == []
    served_elsewhere = Worker.objects.register(["other"], 1)
    served_elsewhere.touch(load=9.0)
    assert why(Schedule.objects.get(), T0) == []


@pytest.mark.parametrize("value", [0, -1, "high", True, float("inf")])
def test_a_bad_max_load_is_refused(value):
    with pytest.raises(ValidationError) as raised:
        clean_definition("bad", {"queue": "default", "every": "1h", "max_load": value})
    assert "max_load" in str(raised.value)
