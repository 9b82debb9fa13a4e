"""Key families: `limits=[("tenant", 42)]`, `rate_key=("api", 7)`, `order_key=("account", 3)`,
each member's limit or rate given by its family's default in the settings (or its own entry)
and its row made at submit, so no row is made by hand; weighted rates; `rates.consume()`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from scylla_django import rates
from scylla_django.conf import scylla_settings
from scylla_django.exceptions import RateExceeded
from scylla_django.models import Key, Limit, Rate, Task, key_control, keys
from tests.factories import WorkerFactory

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

FAMILIES = {
    "LIMITS": {"tenant": {"default": 2, "42": 3}, "stripe": 1},
    "RATES": {"api": {"default": "2/h", "7": "3/h"}, "openai": "10/h"},
}


def lease(worker, limit: int = 50) -> list[Task]:
    return Task.objects.lease(worker, ["default"], limit=limit, lease_length=timedelta(seconds=30))


def running(name: str) -> int:
    return keys.holders(Task.objects.all(), "C:" + name).count()


def test_a_family_member_needs_no_row_and_takes_its_default(settings):
    settings.SCYLLA = FAMILIES
    worker = WorkerFactory()
    for tenant in range(20):
        for n in range(4):
            Task.objects.submit("default", n, limits=[("tenant", tenant)])
    for _ in range(4):
        for task in lease(worker, limit=7):
            task.complete(worker) if task.pk % 2 else None
    sizes = dict(
        Limit.objects.filter(name__startswith="tenant:").values_list("name", "max_running")
    )
    assert len(sizes) == 20
    assert set(sizes.values()) == {2}
    lease(worker)
    for tenant in range(20):
        assert running(f"tenant:{tenant}") <= 2
    assert running("tenant:0") == 2


def test_a_member_named_in_the_settings_has_its_own_size(settings):
    settings.SCYLLA = FAMILIES
    assert scylla_settings.LIMITS == {"tenant:42": 3, "stripe": 1}
    assert scylla_settings.LIMIT_FAMILIES == {"tenant": 2}
    worker = WorkerFactory()
    for n in range(5):
        Task.objects.submit("default", n, limits=[("tenant", 42)])
    lease(worker)
    assert running("tenant:42") == 3


def test_a_name_outside_any_family_is_still_unknown(settings):
    settings.SCYLLA = FAMILIES
    with pytest.raises(ValidationError) as error:
        Task.objects.submit("default", 1, limits=[("region", "eu")])
    assert error.value.error_dict["limits"][0].code == "unknown_limit"
    with pytest.raises(ValidationError):
        Task.objects.submit("default", 1, limits=[("tenant", "")])
    assert not Task.objects.exists()


def test_a_changed_family_default_sets_its_members_again(settings):
    settings.SCYLLA = FAMILIES
    Task.objects.submit("default", 1, limits=[("tenant", 1), ("tenant", 42)])
    settings.SCYLLA = {**FAMILIES, "LIMITS": {"tenant": {"default": 4, "42": 3}}}
    changes = key_control.apply_settings(scylla_settings.LIMITS, scylla_settings.RATES, "default")
    assert [(c.name, c.new) for c in changes] == [("tenant:1", "4")]
    assert Limit.objects.get(name="tenant:1").max_running == 4
    assert Limit.objects.get(name="tenant:42").max_running == 3


def test_rate_and_order_key_families(settings):
    settings.SCYLLA = FAMILIES
    worker = WorkerFactory()
    for n in range(4):
        Task.objects.submit("default", n, rate_key=("api", 9))
    ordered = [Task.objects.submit("default", n, order_key=("account", 3)) for n in range(2)]
    assert ordered[0].order_key == "account:3"
    leased = lease(worker)
    assert sum(1 for t in leased if t.keys == ["R:api:9"]) == 2
    assert [t.pk for t in leased if t.order_key] == [ordered[0].pk]
    assert Rate.objects.get(name="api:9").count == 2


def test_a_weighted_start_spends_its_cost(settings):
    settings.SCYLLA = FAMILIES
    worker = WorkerFactory()
    big = Task.objects.submit("default", 1, rate_key=("openai", {"cost": 8}))
    small = [Task.objects.submit("default", n, rate_key="openai") for n in range(4)]
    leased = lease(worker)
    assert [t.pk for t in leased] == [big.pk, small[0].pk, small[1].pk]
    assert len(Key.objects.get(name="R:openai").starts) == 10
    with pytest.raises(ValidationError) as error:
        Task.objects.submit("default", 1, rate_key=("openai", {"cost": 0}))
    assert error.value.error_dict["rate_key"][0].code == "invalid_cost"


def test_consume_shares_the_window_with_tasks(settings):
    settings.SCYLLA = FAMILIES
    worker = WorkerFactory()
    rates.consume("openai", 6)
    for n in range(5):
        Task.objects.submit("default", n, rate_key="openai")
    assert len(lease(worker)) == 4
    with pytest.raises(RateExceeded) as error:
        rates.consume("openai", 1)
    assert error.value.code == "rate_exceeded"
    assert 3500 < error.value.retry_after <= 3600
    assert len(Key.objects.get(name="R:openai").starts) == 10


def test_consume_refuses_what_no_window_can_hold(settings):
    settings.SCYLLA = FAMILIES
    with pytest.raises(ValidationError) as error:
        rates.consume("openai", 11)
    assert error.value.code == "invalid_cost"
    with pytest.raises(ValidationError) as error:
        rates.consume("nothing", 1)
    assert error.value.code == "unknown_rate"
    rates.consume(("api", 5), 2)
    with pytest.raises(RateExceeded):
        rates.consume(("api", 5), 1)


def test_manage_py_check_accepts_families_and_reports_a_bad_one(settings, capsys):
    settings.SCYLLA = FAMILIES
    call_command("check")
    settings.SCYLLA = {"LIMITS": {"tenant": {"default": 0}}, "RATES": {"api": {"default": "x"}}}
    with pytest.raises(Exception) as error:
        call_command("check")
    assert "LIMITS['tenant']['default']" in str(error.value)
    assert "RATES']['api:*']" in str(error.value)
