"""Which ready task a lease picks: numeric priority, FIFO, exact queue names, not_before."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scylla_django.models import Task
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def lease_all(worker, queues, n=100):
    return [t.rn for t in Task.objects.lease(worker, queues, limit=n)]


def test_priorities_sort_as_numbers_not_text(worker):
    # As text "9" > "100" > "10"; as numbers 100 > 10 > 9.
    for priority in (9, 100, 10, 0, 255):
        TaskFactory(rn=f"p{priority}", priority=priority)
    assert lease_all(worker, ["default"]) == ["p255", "p100", "p10", "p9", "p0"]


def test_one_at_a_time_takes_the_highest_priority_first(worker):
    for priority in (9, 100, 10):
        TaskFactory(rn=f"p{priority}", priority=priority)
    assert [lease_all(worker, ["default"], n=1) for _ in range(3)] == [["p100"], ["p10"], ["p9"]]


def test_fifo_within_a_priority(worker):
    for n in range(6):
        TaskFactory(rn=f"t{n}", priority=5)
    TaskFactory(rn="late-but-urgent", priority=6)
    assert lease_all(worker, ["default"]) == ["late-but-urgent"] + [f"t{n}" for n in range(6)]


def test_queues_match_by_equality_only(worker):
    # "_" and "." would be wildcards under LIKE; names match exactly.
    TaskFactory(rn="underscore", queue="a_c")
    TaskFactory(rn="letter", queue="abc")
    TaskFactory(rn="dot", queue="a.c")
    TaskFactory(rn="prefix", queue="a_cd")
    assert lease_all(worker, ["a_c"]) == ["underscore"]
    assert lease_all(worker, ["a.c", "abc"]) == ["letter", "dot"]
    assert Task.objects.get(rn="prefix").status == "ready"


def test_several_queues_share_one_priority_order(worker):
    TaskFactory(rn="low", queue="a", priority=1)
    TaskFactory(rn="high", queue="b", priority=2)
    TaskFactory(rn="other", queue="c", priority=3)
    assert lease_all(worker, ["a", "b"]) == ["high", "low"]


def test_not_before_delays_a_task(worker):
    now = timezone.now()
    TaskFactory(rn="later", not_before=now + timedelta(hours=1), priority=9)
    TaskFactory(rn="past", not_before=now - timedelta(seconds=1))
    TaskFactory(rn="plain")
    assert lease_all(worker, ["default"]) == ["past", "plain"]
    Task.objects.filter(rn="later").update(not_before=now - timedelta(hours=1))
    assert lease_all(worker, ["default"]) == ["later"]
