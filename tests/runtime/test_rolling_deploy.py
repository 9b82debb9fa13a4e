"""Two monitors with different settings, as in a rolling deploy: neither deletes a schedule the
other's settings define while it runs (an operator's pause and a waiting firing are kept), the
newest monitor's definition of a name rules without flapping, and a schedule no running
monitor defines any more is deleted, with a log line.

Each monitor is an in-process `Monitor` whose passes run under its own `SCYLLA` setting, on the
schedules' virtual clock; liveness is the database's (the monitors' interval is long enough
that neither turns silent during the test).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from scylla_django.db import Now
from scylla_django.models import Limit, Rate, Schedule, Task, WaitingRun
from scylla_django.models import Monitor as MonitorRecord
from scylla_django.monitor import Monitor

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 6, 1, tzinfo=UTC)

OLD = {
    "SCHEDULES": {
        "heartbeat": {"every": "5s", "queue": "beats"},
        "report": {"every": "1m", "queue": "reports", "max_concurrent": 1},
    },
    "LIMITS": {"stripe": 3},
    "RATES": {"mail": "100/m"},
}
NEW = {
    "SCHEDULES": {"heartbeat": {"every": "10s", "queue": "beats"}},  # report removed
    "LIMITS": {"stripe": 5},
    "RATES": {"mail": "50/m"},
}


class Deploy:
    """Monitors that share the database and the schedules' clock, each with its settings."""

    def __init__(self) -> None:
        self.now = T0

    def monitor(self) -> Monitor:
        return Monitor(interval=600, clock=lambda: self.now)

    def run(self, monitor: Monitor, settings: dict) -> None:
        with override_settings(SCYLLA=settings):
            monitor.run_once([monitor.schedules, monitor.limits])


def ticks(name: str) -> list[str]:
    rns = Task.objects.filter(rn__startswith=f"schedule:{name}:").values_list("rn", flat=True)
    return sorted(rn.rsplit(":", 1)[1] for rn in rns if "manual" not in rn)


@pytest.mark.parametrize("end", ["stopped", "dead"])
def test_a_monitor_keeps_the_schedules_another_running_monitor_defines(caplog, end):
    deploy = Deploy()
    old = deploy.monitor()
    deploy.run(old, OLD)
    assert sorted(Schedule.objects.values_list("name", flat=True)) == ["heartbeat", "report"]
    # The report ticks; its next firing waits for the first's task (max_concurrent 1).
    for minutes in (1, 2):
        deploy.now = T0 + timedelta(minutes=minutes)
        deploy.run(old, OLD)
    assert WaitingRun.objects.filter(schedule__name="report").count() == 1
    Schedule.objects.filter(name="report").update(enabled=False)  # an operator's pause

    caplog.set_level(logging.INFO, logger="scylla_django")
    new = deploy.monitor()  # the new release starts beside the old one
    for seconds in (5, 10, 15):
        deploy.now = T0 + timedelta(minutes=2, seconds=seconds)
        deploy.run(new, NEW)
        deploy.run(old, OLD)
    report = Schedule.objects.get(name="report")  # not deleted while the old monitor runs
    assert (report.enabled, WaitingRun.objects.filter(schedule=report).count()) == (False, 1)
    assert (
        f"schedule 'report' is not in this monitor's SCYLLA['SCHEDULES'], but {old.record} "
        "(running) defines it: kept while it runs"
    ) in caplog.messages
    kept = [m for m in caplog.messages if "schedule 'report' is not in" in m]
    assert len(kept) == 1  # said once, not at every pass

    if end == "stopped":  # the old release is gone ...
        old.stop_record()
    else:  # ... or was killed, and three of its intervals went by
        MonitorRecord.objects.filter(pk=old.record.pk).update(dead_at=Now())
    deploy.now = T0 + timedelta(minutes=2, seconds=20)
    deploy.run(new, NEW)
    assert list(Schedule.objects.values_list("name", flat=True)) == ["heartbeat"]
    assert (
        "schedule 'report' deleted: it came from SCYLLA['SCHEDULES'], and no running "
        "monitor's settings define it any more"
    ) in caplog.messages


def test_the_newest_monitor_s_definition_rules_without_flapping(caplog):
    deploy = Deploy()
    old = deploy.monitor()
    deploy.run(old, OLD)
    caplog.set_level(logging.INFO, logger="scylla_django")
    new = deploy.monitor()
    deploy.run(new, NEW)
    # Both monitors pass every 5 s of the schedules' clock for two minutes.
    for step in range(1, 25):
        deploy.now = T0 + timedelta(seconds=5 * step)
        deploy.run(old, OLD)
        assert Schedule.objects.get(name="heartbeat").every == timedelta(seconds=10)
        deploy.run(new, NEW)
    # One tick every 10 s, the new definition's, from the first pass to the last.
    assert ticks("heartbeat") == [
        (T0 + timedelta(seconds=10 * n)).strftime("%Y%m%dT%H%M%SZ") for n in range(1, 13)
    ]
    said = [m for m in caplog.messages if "SCYLLA['SCHEDULES'] defines" in m]
    assert said == [
        f"this monitor's SCYLLA['SCHEDULES'] defines heartbeat otherwise than {new.record}, "
        "which started after it: its definitions rule while it runs"
    ]


@pytest.mark.keys
def test_limits_and_rates_follow_the_newest_monitor_s_settings():
    deploy = Deploy()
    old = deploy.monitor()
    with override_settings(SCYLLA=OLD):
        Task.objects.submit("default", 1, limits=["stripe"], rate_key="mail")
    new = deploy.monitor()
    for _ in range(3):
        deploy.run(old, OLD)
        deploy.run(new, NEW)
        limit, mail = Limit.objects.get(name="stripe"), Rate.objects.get(name="mail")
        assert (limit.max_running, mail.count) == (5, 50)
    # A submission from a process still on the old settings makes no row (it exists) and
    # changes none.
    with override_settings(SCYLLA=OLD):
        Task.objects.submit("default", 2, limits=["stripe"], rate_key="mail")
    deploy.run(old, OLD)
    assert Limit.objects.get(name="stripe").max_running == 5
    new.stop_record()  # a rollback: the new release stops, the old settings rule again
    deploy.run(old, OLD)
    assert (Limit.objects.get(name="stripe").max_running, Rate.objects.get(name="mail").count) == (
        3,
        100,
    )
