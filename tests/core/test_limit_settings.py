"""Limits and rates follow `SCYLLA["LIMITS"]` and `SCYLLA["RATES"]`: the monitor sets a row made
from the settings to their new value when they change, as it syncs schedules; a change made at
runtime (the admin, the API) holds until the settings give that name a new value, and a limit
or rate made at runtime for a name the settings lack is never touched."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.urls import reverse

from scylla_django.models import Limit, Rate, Task, key_control
from scylla_django.monitor import Monitor
from tests.helpers import staff

pytestmark = [pytest.mark.django_db, pytest.mark.keys]


def sync() -> Monitor:
    """A monitor's pass of the service that applies the settings' limits and rates."""
    monitor = Monitor(interval=60)
    monitor.run_once([monitor.limits])
    return monitor


def size(name: str) -> int:
    return Limit.objects.get(name=name).max_running


def rate(name: str) -> tuple[int, float]:
    row = Rate.objects.get(name=name)
    return row.count, row.seconds


def use(name: str) -> key_control.LimitUse:
    [found] = [u for u in key_control.limit_use(Task.objects.all()) if u.name == name]
    return found


def test_a_limit_from_the_settings_follows_a_change_of_them(settings, caplog):
    settings.SCYLLA = {"LIMITS": {"stripe": 3}}
    Task.objects.submit("default", 1, limits=["stripe"])  # the row is made at first use
    assert size("stripe") == 3
    settings.SCYLLA = {"LIMITS": {"stripe": 5}}  # a deploy with a new value
    assert use("stripe").configured is False  # the row still says 3: not what settings say
    caplog.set_level(logging.INFO, logger="scylla_django")
    monitor = sync()
    assert size("stripe") == 5
    assert monitor.last_pass is not None and monitor.last_pass.settings_applied == 1
    assert "limit 'stripe' set to 5 by SCYLLA['LIMITS'] (it was 3)" in caplog.text
    assert use("stripe").configured is True
    assert sync().last_pass.settings_applied == 0  # nothing more to do


def test_a_rate_from_the_settings_follows_a_change_of_them(settings, caplog):
    settings.SCYLLA = {"RATES": {"mail": "100/m"}}
    Task.objects.submit("default", 1, rate_key="mail")
    assert rate("mail") == (100, 60.0)
    settings.SCYLLA = {"RATES": {"mail": "5/10s"}}
    caplog.set_level(logging.INFO, logger="scylla_django")
    sync()
    assert rate("mail") == (5, 10.0)
    assert "rate 'mail' set to 5/10s by SCYLLA['RATES'] (it was 100/m)" in caplog.text
    settings.SCYLLA = {"RATES": {"mail": "30/m"}}  # "5/10s" and "30/m" differ in burst
    sync()
    assert rate("mail") == (30, 60.0)


def test_a_change_made_at_runtime_holds_until_the_settings_change(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 3}, "RATES": {"mail": "100/m"}}
    Task.objects.submit("default", 1, limits=["stripe"], rate_key="mail")
    key_control.set_limit("stripe", 1)  # an operator throttles at runtime
    key_control.set_rate("mail", "10/m")
    sync()
    assert (size("stripe"), rate("mail")) == (1, (10, 60.0))  # the operator's values hold
    assert use("stripe").configured is False  # and the admin does not call them the settings'
    settings.SCYLLA = {"LIMITS": {"stripe": 7}, "RATES": {"mail": "200/m"}}  # the next deploy
    sync()
    assert (size("stripe"), rate("mail")) == (7, (200, 60.0))


def test_a_limit_made_at_runtime_for_a_name_in_the_settings_holds_too(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 3}}
    key_control.set_limit("stripe", 2)  # made over the API before any task named it
    sync()
    assert size("stripe") == 2


def test_limits_and_rates_the_settings_lack_are_left_alone(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 3}, "RATES": {"mail": "100/m"}}
    key_control.set_limit("pdf", 4)
    key_control.set_rate("sms", "5/10s")
    Task.objects.submit("default", 1, limits=["stripe"], rate_key="mail")
    settings.SCYLLA = {}  # the names left the settings
    sync()
    assert (size("pdf"), rate("sms")) == (4, (5, 10.0))
    assert (size("stripe"), rate("mail")) == (3, (100, 60.0))  # kept: tasks may still name them


def test_the_admin_says_where_a_limit_s_size_comes_from(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 3}}
    Task.objects.submit("default", 1, limits=["stripe"])
    operator = staff("view_task", "control_queue")
    page = reverse("admin:scylla_django_task_keys")

    def source() -> str:
        html = operator.get(page).content.decode()
        row = html.split("<code>stripe</code>", 1)[1].split("</tr>", 1)[0]
        return row

    assert 'SCYLLA["LIMITS"]' in source()
    settings.SCYLLA = {"LIMITS": {"stripe": 5}}
    assert 'SCYLLA["LIMITS"]' not in source()  # the row's 3 is not what the settings say
    sync()
    assert "0/5" in source() and 'SCYLLA["LIMITS"]' in source()


def test_a_pass_applies_the_settings_in_one_read_when_nothing_changed(
    settings, django_assert_max_num_queries
):
    settings.SCYLLA = {"LIMITS": {"a": 1, "b": 2}, "RATES": {"r": "1/s"}}
    Task.objects.submit("default", 1, limits=["a", "b"], rate_key="r")
    monitor = Monitor(interval=60)
    monitor.run_once([monitor.limits])
    with django_assert_max_num_queries(5):  # the monitors, the limits, the rates, its touch
        monitor.run_once([monitor.limits])


def test_the_monitor_runs_it_at_every_pass(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 3}}
    Task.objects.submit("default", 1, limits=["stripe"])
    settings.SCYLLA = {"LIMITS": {"stripe": 4}}
    assert Monitor(interval=60, retention=timedelta(days=1)).run_once().settings_applied == 1
    assert size("stripe") == 4
