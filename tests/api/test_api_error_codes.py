"""One code per error, the same from Python and over HTTP: a bad `order_on_failure`, a bad
`on_conflict`, a limit nobody made (alone and as a bulk item), and a bad rate, each checked
through `Task.objects` / `key_control` and through the API, and nothing written either way."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from scylla_django.models import Rate, Task, key_control
from tests.helpers import API, client_for, make_user, post

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

# (the submission's fields, the field at fault, the code Python and HTTP both give)
BAD_SUBMISSIONS = [
    ({"order_key": "customer:9", "order_on_failure": "later"}, "order_on_failure", "invalid_key"),
    ({"order_key": "customer:9", "order_on_failure": 1}, "order_on_failure", "invalid_key"),
    ({"unique_key": "invoice:7", "on_conflict": "ignore"}, "on_conflict", "invalid_on_conflict"),
    ({"unique_key": "invoice:7", "on_conflict": True}, "on_conflict", "invalid_on_conflict"),
    ({"limits": ["nobody-made-me"]}, "limits", "unknown_limit"),
]
BAD_RATES = ["lots", "100/fortnight", "0/m", 100, "1234567890/m"]


def python_codes(**fields: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as raised:
        Task.objects.submit("invoices", {"id": 7}, **fields)
    return {name: [e.code for e in errors] for name, errors in raised.value.error_dict.items()}


def http_codes(body: dict[str, Any]) -> dict[str, list[str]]:
    return {name: [e["code"] for e in errors] for name, errors in body["errors"].items()}


@pytest.mark.parametrize(("fields", "field", "code"), BAD_SUBMISSIONS)
def test_a_bad_submission_has_the_same_code_from_python_and_http(api, fields, field, code):
    assert python_codes(**fields) == {field: [code]}
    response = post(api, "/tasks/", {"queue": "invoices", "spec": {"id": 7}, **fields})
    assert response.status_code == 400, response.content
    assert http_codes(response.json()) == {field: [code]}
    assert not Task.objects.exists()


@pytest.mark.parametrize(("fields", "field", "code"), BAD_SUBMISSIONS)
def test_a_bad_bulk_item_has_the_same_code_from_python_and_http(api, fields, field, code):
    item = {"queue": "invoices", "spec": {"id": 7}, **fields}
    [outcome] = Task.objects.submit_many([item])
    assert (outcome.outcome, outcome.codes) == ("invalid", {field: [code]})
    response = post(api, "/bulk/tasks/", [item, {"queue": "invoices", "spec": {"id": 8}}])
    assert response.status_code == 200, response.content
    invalid, inserted = response.json()
    assert invalid["outcome"] == "invalid"
    assert http_codes(invalid) == {field: [code]}
    # The message is Python's too, for the errors the submission itself finds.
    assert [e["detail"] for e in invalid["errors"][field]] == outcome.errors[field]
    assert inserted["outcome"] == "inserted"
    assert list(Task.objects.values_list("spec", flat=True)) == [{"id": 8}]


@pytest.fixture
def operator(db):
    return client_for(make_user("operator", "view_task", "control_queue"))


@pytest.mark.parametrize("rate", BAD_RATES)
def test_a_bad_rate_is_invalid_rate_from_python_and_over_post_and_patch(operator, rate):
    with pytest.raises(ValidationError) as raised:
        key_control.set_rate("mail", rate)
    assert raised.value.code == "invalid_rate"
    made = post(operator, "/rates/", {"name": "mail", "rate": rate})
    assert made.status_code == 400, made.content
    assert http_codes(made.json()) == {"rate": ["invalid_rate"]}
    assert not Rate.objects.exists()

    assert post(operator, "/rates/", {"name": "mail", "rate": "100/m"}).status_code == 200
    changed = operator.patch(f"{API}/rates/mail/", {"rate": rate}, format="json")
    assert changed.status_code == 400, changed.content
    assert http_codes(changed.json()) == {"rate": ["invalid_rate"]}
    assert Rate.objects.get(name="mail").count == 100
