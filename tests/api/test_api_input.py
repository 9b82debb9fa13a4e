"""Hostile and malformed input: always a 4xx with a code, never a 500, and nothing written.

Also mass assignment: a client can never set a server-owned field.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from scylla_django.enums import Status
from scylla_django.models import History, Task
from tests.factories import TaskFactory, running_task
from tests.helpers import (
    ALL_PERMISSIONS,
    API,
    assert_error,
    assert_field_error,
    client_for,
    make_user,
    reload,
    worker_of,
)

pytestmark = pytest.mark.django_db

SERVER_OWNED = {
    "status": "completed",
    "owner": "worker-1",
    "deadline": "2999-01-01T00:00:00Z",
    "history": [],
    "errors": [{"code": "x"}],
    "leases": 7,
    "created": "2000-01-01T00:00:00Z",
    "updated": "2000-01-01T00:00:00Z",
    "progress": 0.9,
    "result": {"done": True},
    "id": 1,
}


@pytest.fixture
def staff():
    return make_user("staff", *ALL_PERMISSIONS, is_staff=True)


@pytest.fixture
def staff_api(staff):
    return client_for(staff)


def raw(staff_api, path: str, body: str | bytes):
    """POST a body exactly as given."""
    return staff_api.generic("POST", f"{API}{path}", body, content_type="application/json")


# -- the JSON itself ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "[" * 10_000 + "]" * 10_000,  # deeper than Python's parser goes
        '{"queue": "q", "spec": ' + "1" * 5000 + "}",  # an integer too long to convert
        '{"queue": "q", "spec": NaN}',
        '{"queue": "q", "spec": -Infinity}',
        '{"queue": "q", "spec": 1',
        b'{"queue": "q", "spec": "\xff"}',  # not UTF-8
        "",
    ],
    ids=["deep", "long-int", "nan", "infinity", "truncated", "not-utf8", "empty"],
)
def test_unparseable_json_is_400_parse_error(staff_api, body):
    response = raw(staff_api, "/tasks/", body)
    if body == "":
        assert_field_error(response, "queue", "required")
    else:
        assert_error(response, 400, "parse_error")
    assert not Task.objects.exists()


def test_nesting_past_64_levels_is_refused_by_the_spec_rules(staff_api):
    spec = "[" * 70 + "0" + "]" * 70
    assert_field_error(
        raw(staff_api, "/tasks/", f'{{"queue": "q", "spec": {spec}}}'), "spec", "invalid_json"
    )


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ('{"queue": "q", "spec": 1e999}', "spec", "invalid_json"),
        ('{"queue": "q", "spec": 1, "priority": 1e999}', "priority", "invalid"),
        ('{"queue": "q", "spec": 1, "priority": ' + "9" * 400 + "}", "priority", "max_value"),
        ('{"queue": "q", "spec": 1, "priority": 5.0}', "priority", "invalid"),
        ('{"queue": "q", "spec": 1, "priority": true}', "priority", "invalid"),
        ('{"queue": "q", "spec": 1, "priority": "5"}', "priority", "invalid"),
        ('{"queue": 5, "spec": 1}', "queue", "invalid"),
        ('{"queue": ["q"], "spec": 1}', "queue", "invalid"),
        ('{"queue": "q", "spec": 1, "rn": 7}', "rn", "invalid"),
        ('{"queue": "q", "spec": 1, "not_before": 1700000000}', "not_before", "invalid"),
        ('{"queue": "q\\u0000", "spec": 1}', "queue", "null_characters_not_allowed"),
        ('{"queue": "q", "spec": "a\\u0000b"}', "spec", "invalid_json"),
        ('{"queue": "q", "spec": {"\\u0000": 1}}', "spec", "invalid_json"),
        ('{"queue": "q", "spec": 1, "\\u0000": 1}', "\x00", "unknown_field"),
    ],
)
def test_wrong_types_huge_numbers_and_nul_are_400_per_field(staff_api, body, field, code):
    assert_field_error(raw(staff_api, "/tasks/", body), field, code)
    assert not Task.objects.exists()


def test_a_huge_integer_inside_a_spec_is_stored_exactly(staff_api):
    response = raw(
        staff_api, "/tasks/", '{"rn": "big", "queue": "q", "spec": {"n": ' + "9" * 400 + "}}"
    )
    assert response.status_code == 201
    assert Task.objects.get(rn="big").spec == {"n": int("9" * 400)}
    assert staff_api.get(f"{API}/tasks/big/").json()["spec"] == {"n": int("9" * 400)}


def test_a_timestamp_beyond_what_utc_can_hold_is_clamped(staff_api):
    body = {"rn": "t", "queue": "q", "spec": 1, "not_before": "0001-01-01T00:00:00+01:00"}
    response = staff_api.post(f"{API}/tasks/", body, format="json")
    assert response.status_code == 201
    assert response.json()["not_before"] == "0001-01-01T00:00:00Z"


@pytest.mark.parametrize("operation", ["heartbeat", "complete", "abort", "yield"])
@pytest.mark.parametrize("worker_name", [7, None, "worker-1\x00", "w" * 65, "worker-" + "9" * 30])
def test_a_bad_worker_name_is_a_4xx(staff_api, staff, operation, worker_name):
    task = running_task(worker_of(staff), rn="t1")
    body = {"worker": worker_name, "errors": [{"code": "x"}], "progress": 0.5}
    allowed = {"heartbeat": {"worker", "progress"}, "abort": {"worker", "errors"}}
    body = {k: v for k, v in body.items() if k in allowed.get(operation, {"worker"})}
    response = staff_api.post(f"{API}/tasks/t1/{operation}/", body, format="json")
    assert response.status_code in {400, 404}, response.content
    assert response.json()["code"] in {"invalid", "worker_not_found"}
    assert reload(task).status == Status.RUNNING


@pytest.mark.parametrize("value", ["1e999", "-1e999", "9" * 400, '"1"', "true", "null"])
def test_bad_numbers_in_worker_bodies_are_400(staff_api, staff, value):
    worker = worker_of(staff)
    task = running_task(worker, rn="t1")
    body = (
        f'{{"worker": "{worker.name}", "lease": 1, "progress": {value}, "lease_length": {value}}}'
    )
    response = raw(staff_api, "/tasks/t1/heartbeat/", body)
    assert set(assert_error(response, 400, "invalid")["errors"]) == {"progress", "lease_length"}
    lease = raw(
        staff_api,
        f"/workers/{worker.name}/lease/",
        f'{{"limit": {value}, "lease_length": {value}}}',
    )
    assert set(assert_error(lease, 400, "invalid")["errors"]) == {"limit", "lease_length"}
    assert reload(task).progress == 0.0


# -- paths and query strings --------------------------------------------------------------------


@pytest.mark.parametrize("rn", ["%00", "a%00b", "%FF", "..", "%2e%2e"])
def test_odd_rns_in_paths_are_404(staff_api, rn):
    assert_error(staff_api.get(f"{API}/tasks/{rn}/"), 404, "task_not_found")
    assert_error(staff_api.post(f"{API}/tasks/{rn}/cancel/"), 404, "task_not_found")


@pytest.mark.parametrize("path", ["rates/a%0Ab/", "limits/a%0Ab/", "no%0Aroute/"])
def test_a_line_break_in_a_path_is_a_404_in_the_apis_format(staff_api, path):
    assert_error(staff_api.patch(f"{API}/{path}", {}, format="json"), 404, "not_found")


@pytest.mark.parametrize("name", ["worker-%00", "worker-1%00", "%00"])
def test_odd_worker_names_in_paths_are_404(staff_api, name):
    assert_error(staff_api.post(f"{API}/workers/{name}/lease/"), 404, "worker_not_found")


@pytest.mark.parametrize(
    ("query", "param", "code"),
    [
        ("queue=q%00", "queue", "null_characters_not_allowed"),
        ("owner=w%00", "owner", "null_characters_not_allowed"),
        ("rn=a%00", "rn", "null_characters_not_allowed"),
        ("status=%00", "status", "invalid_choice"),
        ("status=done", "status", "invalid_choice"),
        ("priority_min=1e999", "priority_min", "invalid"),
        ("priority_max=" + "9" * 5000, "priority_max", "invalid"),
        ("priority_min=-1", "priority_min", "min_value"),
        ("created_after=yesterday", "created_after", "invalid"),
        ("updated_before=%00", "updated_before", "invalid"),
        ("queue=", "queue", "blank"),
        ("ordering=%00", "ordering", "invalid_choice"),
        ("ordering=spec", "ordering", "invalid_choice"),
        ("ordering=", "ordering", "invalid_choice"),
        ("page_size=0", "page_size", "invalid"),
        ("page_size=-1", "page_size", "invalid"),
        ("page_size=ten", "page_size", "invalid"),
    ],
)
def test_bad_query_parameters_are_400(staff_api, query, param, code):
    TaskFactory()
    assert_field_error(staff_api.get(f"{API}/tasks/?{query}"), param, code)


@pytest.mark.parametrize("cursor", ["%00", "garbage", "W10", "WyJ4Il0", "eyJhIjoxfQ"])
def test_a_cursor_that_is_not_ours_is_404(staff_api, cursor):
    TaskFactory()
    assert_error(staff_api.get(f"{API}/tasks/?cursor={cursor}"), 404, "invalid_cursor")


def test_timestamps_beyond_utc_in_filters_are_clamped(staff_api):
    TaskFactory()
    response = staff_api.get(f"{API}/tasks/?created_after=0001-01-01T00:00:00%2B01:00")
    assert len(response.json()["results"]) == 1
    response = staff_api.get(f"{API}/tasks/?created_before=9999-12-31T23:00:00-05:00")
    assert len(response.json()["results"]) == 1


@override_settings(DATA_UPLOAD_MAX_NUMBER_FIELDS=10)
def test_too_many_query_parameters_is_400(staff_api):
    assert_error(
        staff_api.get(f"{API}/tasks/?" + "&".join(["status=ready"] * 20)), 400, "bad_request"
    )


# -- mass assignment ----------------------------------------------------------------------------


def test_server_owned_fields_cannot_be_submitted(staff_api):
    body = {"rn": "t1", "queue": "q", "spec": 1, **SERVER_OWNED}
    response = staff_api.post(f"{API}/tasks/", body, format="json")
    assert set(assert_error(response, 400, "invalid")["errors"]) == set(SERVER_OWNED)
    assert not Task.objects.exists()


@pytest.mark.parametrize(("field", "value"), list(SERVER_OWNED.items()))
def test_a_server_owned_field_in_a_bulk_item_makes_it_invalid(staff_api, field, value):
    items = [
        {"rn": "bad", "queue": "q", "spec": 1, field: value},
        {"rn": "ok", "queue": "q", "spec": 1},
    ]
    outcomes = staff_api.post(f"{API}/bulk/tasks/", items, format="json").json()
    assert [o["outcome"] for o in outcomes] == ["invalid", "inserted"]
    assert outcomes[0]["errors"] == {field: [{"code": "unknown_field", "detail": "Unknown field."}]}
    assert list(Task.objects.values_list("rn", flat=True)) == ["ok"]
    ok = Task.objects.get(rn="ok")
    assert (ok.status, ok.leases, ok.owner, ok.errors, ok.result) == (
        Status.READY,
        0,
        None,
        [],
        None,
    )


@pytest.mark.parametrize("operation", ["heartbeat", "complete", "abort", "yield"])
def test_server_owned_fields_cannot_ride_along_a_worker_operation(staff_api, staff, operation):
    worker = worker_of(staff)
    task = running_task(worker, rn="t1")
    before = reload(task)
    body = {
        "worker": worker.name,
        "lease": 1,
        "owner": "worker-0",
        "status": "ready",
        "leases": 0,
    }
    if operation == "abort":
        body["errors"] = [{"code": "x"}]
    response = staff_api.post(f"{API}/tasks/t1/{operation}/", body, format="json")
    assert set(assert_error(response, 400, "invalid")["errors"]) == {"owner", "status", "leases"}
    after = reload(task)
    assert (after.status, after.owner, after.leases, after.deadline, after.updated) == (
        before.status,
        before.owner,
        before.leases,
        before.deadline,
        before.updated,
    )
    assert History.objects.filter(task=task).count() == 1
