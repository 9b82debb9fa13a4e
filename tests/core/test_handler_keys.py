"""`@handler(queue, locks=..., limits=..., order_key=..., rate_key=...)`: the keys of a task
submitted to the queue without its own, values or functions of the spec; a bad definition fails
at decoration, an unconfigured limit or rate is a system check warning."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scylla_django import checks, queue_keys
from scylla_django.handlers import HandlerRegistry, handler
from scylla_django.models import Task, keys

pytestmark = [pytest.mark.django_db, pytest.mark.keys]


@pytest.fixture
def registry(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 2}, "RATES": {"stripe": "10/s"}}
    yield HandlerRegistry()
    for queue in queue_keys.registered():
        queue_keys.register_keys(queue)


def test_defaults_apply_when_the_submission_names_none(registry):
    @handler(
        "invoices",
        registry=registry,
        locks=lambda spec: [f"invoice:{spec['id']}", ("ledger", "shared")],
        limits=["stripe"],
        order_key=lambda spec: f"customer:{spec['customer']}",
        order_on_failure="continue",
        rate_key="stripe",
    )
    def invoices(context):
        return None

    task = Task.objects.submit("invoices", {"id": 7, "customer": 9})
    assert keys.described(task) == {
        "locks": [["invoice:7", "exclusive"], ["ledger", "shared"]],
        "limits": ["stripe"],
        "order_key": "customer:9",
        "order_on_failure": "continue",
        "rate_key": "stripe",
    }
    own = Task.objects.submit("invoices", {"id": 7, "customer": 9}, locks=["mine"])
    assert keys.described(own)["locks"] == [["mine", "exclusive"]]
    assert keys.described(own)["limits"] == ["stripe"]  # the others still apply
    other = Task.objects.submit("elsewhere", {"id": 7})
    assert other.keys is None


def test_a_unique_key_and_keys_together(registry):
    @handler("mail", registry=registry, unique_key=lambda s: f"mail:{s}", locks=["smtp"])
    def mail(context):
        return None

    first = Task.objects.submit("mail", 1)
    again = Task.objects.submit("mail", 1)
    assert again.pk == first.pk and first.keys == ["L:smtp"]


def test_a_failing_function_is_the_submissions_bad_input(registry):
    @handler("invoices", registry=registry, locks=lambda spec: [spec["id"]])
    def invoices(context):
        return None

    with pytest.raises(ValidationError) as caught:
        Task.objects.submit("invoices", {"no_id": 1})
    assert caught.value.error_dict["locks"][0].code == "invalid_key"
    with pytest.raises(ValidationError) as caught:
        Task.objects.submit("invoices", {"id": ""})
    assert caught.value.error_dict["locks"][0].code == "invalid_key"
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    "options",
    [
        {"locks": "invoice"},
        {"locks": [""]},
        {"locks": [("a", "sometimes")]},
        {"limits": ["x" * 201]},
        {"order_key": 9},
        {"order_on_failure": "skip"},
        {"rate_key": ""},
        {"order_key": "a\x00b"},
        {"unique_key": "fixed"},
    ],
)
def test_a_bad_definition_fails_at_decoration(registry, options):
    with pytest.raises(TypeError):
        handler("invoices", registry=registry, **options)
    assert "invoices" not in queue_keys.registered()


def test_an_unconfigured_limit_or_rate_is_a_warning(registry):
    @handler("invoices", registry=registry, limits=["stripe", "paypal"], rate_key="sms")
    def invoices(context):
        return None

    found = {(m.id, m.msg) for m in checks.check_handler_keys()}
    assert {id for id, _ in found} == {"scylla_django.W020", "scylla_django.W021"}
    assert any("'paypal'" in msg for _, msg in found)
    assert any("'sms'" in msg for _, msg in found)
    assert not any("'stripe'" in msg for _, msg in found)
