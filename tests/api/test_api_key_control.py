"""The operators' key routes: `GET /locks/`, `GET|POST /limits/`, `PATCH /limits/{name}/`,
`GET|POST /rates/`, `PATCH /rates/{name}/`, `POST /holds/{token}/release/`,
`POST /tasks/{rn}/release-order/` and the list's `?key=` filter."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scylla_django.models import Hold, Limit, Rate, Task, keys
from tests.helpers import API, assert_error, assert_field_error, client_for, make_user, post, typs

pytestmark = [pytest.mark.django_db, pytest.mark.keys]


@pytest.fixture(autouse=True)
def configured(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 2, "idle": 5}, "RATES": {"sms": "3/m"}}


@pytest.fixture
def operator(db):
    return client_for(make_user("operator", "view_task", "submit_task", "control_queue"))


def lease(worker, limit: int = 10) -> list[Task]:
    return Task.objects.lease(worker, ["default"], limit=limit, lease_length=timedelta(seconds=60))


def patch(client, path: str, body: object):
    return client.patch(f"{API}{path}", body, format="json")


def test_locks_held_by_tasks_and_holds(operator, worker):
    task = Task.objects.submit("default", 1, locks=["invoice:7", ("ledger", "shared")])
    lease(worker)
    token = keys.acquire_lock("cron", ttl=None)
    response = operator.get(f"{API}/locks/")
    assert response.status_code == 200, response.content
    held = response.json()
    assert [(h["key"], h["mode"], h["holder"], h["hold"]) for h in held] == [
        ("cron", "exclusive", None, token),
        ("invoice:7", "exclusive", task.rn, None),
        ("ledger", "shared", task.rn, None),
    ]
    assert all(h["since"] for h in held)
    assert held[0]["expires"] is None and held[1]["expires"] is not None


def test_an_expired_hold_is_not_held(operator):
    token = keys.acquire_lock("cron", ttl=60)
    Hold.objects.filter(pk=token).update(until=1.0)
    assert operator.get(f"{API}/locks/").json() == []


def test_limits_with_their_use(operator, worker):
    for n in range(3):
        Task.objects.submit("default", n, limits=["stripe"])
    lease(worker)
    response = operator.get(f"{API}/limits/")
    assert response.status_code == 200, response.content
    assert response.json() == [
        {"name": "idle", "max_running": 5, "running": 0, "configured": True},
        {"name": "stripe", "max_running": 2, "running": 2, "configured": True},
    ]


def test_a_limit_is_changed_at_runtime_and_the_next_lease_uses_it(operator, worker):
    for n in range(3):
        Task.objects.submit("default", n, limits=["stripe"])
    assert len(lease(worker)) == 2
    response = patch(operator, "/limits/stripe/", {"max_running": 3})
    assert response.status_code == 200, response.content
    assert response.json()["max_running"] == 3 and response.json()["running"] == 2
    assert Limit.objects.get(name="stripe").max_running == 3
    assert len(lease(worker)) == 1


def test_a_limit_is_made_with_post_and_tasks_may_name_it(operator):
    response = post(operator, "/limits/", {"name": "pdf", "max_running": 4})
    assert response.status_code == 200, response.content
    assert response.json() == {"name": "pdf", "max_running": 4, "running": 0, "configured": False}
    task = post(operator, "/tasks/", {"queue": "q", "spec": {}, "limits": ["pdf"]})
    assert task.status_code == 201, task.content


@pytest.mark.parametrize(
    ("path", "body", "field", "code"),
    [
        ("/limits/", {"name": "", "max_running": 2}, "name", "blank"),
        ("/limits/", {"name": "x" * 201, "max_running": 2}, "name", "max_length"),
        ("/limits/", {"name": "a", "max_running": 0}, "max_running", "min_value"),
        ("/limits/", {"name": "a", "max_running": "2"}, "max_running", "invalid"),
        ("/limits/", {"name": "a"}, "max_running", "required"),
        ("/rates/", {"name": "a", "rate": "100/fortnight"}, "rate", "invalid_rate"),
        ("/rates/", {"name": "a", "rate": 100}, "rate", "invalid_rate"),
        ("/rates/", {"name": "a", "rate": "0/m"}, "rate", "invalid_rate"),
    ],
)
def test_bad_limits_and_rates_are_400_and_write_nothing(operator, path, body, field, code):
    assert_field_error(post(operator, path, body), field, code)
    assert not Limit.objects.exists() and not Rate.objects.exists()


def test_changing_an_unknown_limit_or_rate_is_404(operator):
    assert_error(patch(operator, "/limits/nope/", {"max_running": 2}), 404, "limit_not_found")
    assert_error(patch(operator, "/rates/nope/", {"rate": "1/s"}), 404, "rate_not_found")
    assert_error(
        patch(operator, f"/limits/{'x' * 201}/", {"max_running": 2}), 404, "limit_not_found"
    )
    assert not Limit.objects.exists() and not Rate.objects.exists()


def test_rates_with_their_starts_and_changed_at_runtime(operator, worker):
    for n in range(4):
        Task.objects.submit("default", n, rate_key="sms")
    assert len(lease(worker)) == 3
    [rate] = operator.get(f"{API}/rates/").json()
    assert rate == {
        "name": "sms",
        "rate": "3/m",
        "count": 3,
        "seconds": 60.0,
        "starts": 3,
        "configured": True,
    }
    response = patch(operator, "/rates/sms/", {"rate": "5/10m"})
    assert response.status_code == 200, response.content
    assert (response.json()["count"], response.json()["seconds"]) == (5, 600.0)
    assert response.json()["rate"] == "5/10m"
    assert len(lease(worker)) == 1
    made = post(operator, "/rates/", {"name": "mail", "rate": "100/h"})
    assert made.status_code == 200, made.content
    assert made.json()["rate"] == "100/h"


def test_a_hold_is_force_released_once(operator, worker):
    token = keys.acquire_lock("invoice:7", ttl=None)
    task = Task.objects.submit("default", 1, locks=["invoice:7"])
    assert lease(worker) == []
    response = post(operator, f"/holds/{token}/release/", {})
    assert response.status_code == 200, response.content
    assert response.json() == {"hold": token, "released": True}
    assert [t.pk for t in lease(worker)] == [task.pk]
    assert_error(post(operator, f"/holds/{token}/release/", {}), 404, "hold_not_found")
    assert_error(post(operator, f"/holds/{2**70}/release/", {}), 404, "hold_not_found")
    assert not keys.release_lock(token)  # its holder's own release finds nothing


def aborted_for_good(worker, order_key: str = "customer:9") -> tuple[Task, Task]:
    first = Task.objects.submit("default", 1, order_key=order_key)
    second = Task.objects.submit("default", 2, order_key=order_key)
    [leased] = lease(worker)
    assert leased.pk == first.pk
    leased.abort(worker, [{"code": "boom", "args": {}, "description": ""}], retry=False)
    assert lease(worker) == []  # the key is held by the aborted task
    return leased, second


def test_releasing_the_order_key_of_an_aborted_task_lets_the_next_run(operator, worker):
    first, second = aborted_for_good(worker)
    waiting = operator.get(f"{API}/tasks/{second.rn}/").json()["waiting"]
    assert [w["code"] for w in waiting] == ["order_waits"] and waiting[0]["for"] == first.rn
    response = post(operator, f"/tasks/{first.rn}/release-order/", {})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "aborted"
    assert typs(first)[-1] == "TaskOrderRelease"
    assert [t.pk for t in lease(worker)] == [second.pk]
    again = post(operator, f"/tasks/{first.rn}/release-order/", {})
    assert_error(again, 409, "invalid_transition")
    assert typs(first).count("TaskOrderRelease") == 1


def test_retrying_the_aborted_task_unblocks_the_key_too(operator, worker):
    first, _ = aborted_for_good(worker)
    retried = post(operator, f"/tasks/{first.rn}/retry/", {})
    assert retried.status_code == 201, retried.content
    assert retried.json()["order_key"] == "customer:9"
    # The retry keeps its predecessor's place: it runs before the second task.
    assert [t.rn for t in lease(worker)] == [retried.json()["rn"]]
    assert_error(post(operator, f"/tasks/{first.rn}/release-order/", {}), 409, "invalid_transition")


def test_release_order_refuses_tasks_that_hold_no_order_key(operator, worker):
    ready = Task.objects.submit("default", 1, order_key="k")
    plain = Task.objects.submit("default", 2)
    for task in (ready, plain):
        assert_error(
            post(operator, f"/tasks/{task.rn}/release-order/", {}), 409, "invalid_transition"
        )
    assert_error(post(operator, "/tasks/nope/release-order/", {}), 404, "task_not_found")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/limits/", {"name": "a", "max_running": 1}),
        ("patch", "/limits/stripe/", {"max_running": 1}),
        ("post", "/rates/", {"name": "a", "rate": "1/s"}),
        ("patch", "/rates/sms/", {"rate": "1/s"}),
        ("post", "/holds/1/release/", {}),
        ("post", "/tasks/x/release-order/", {}),
    ],
)
def test_operations_need_control_queue(api, method, path, body):
    response = getattr(api, method)(f"{API}{path}", body, format="json")
    assert_error(response, 403, "permission_denied")


@pytest.mark.parametrize("path", ["/locks/", "/limits/", "/rates/"])
def test_reading_needs_view_task(path):
    anyone = client_for(make_user("nobody"))
    assert_error(anyone.get(f"{API}{path}"), 403, "permission_denied")


def test_tasks_are_filtered_by_any_key_they_name(operator):
    named = {
        "lock": Task.objects.submit("q", 1, locks=["invoice:7"]),
        "shared": Task.objects.submit("q", 2, locks=[("invoice:7", "shared")]),
        "limit": Task.objects.submit("q", 3, limits=["stripe"]),
        "order": Task.objects.submit("q", 4, order_key="invoice:7"),
        "rate": Task.objects.submit("q", 5, rate_key="sms"),
        "unique": Task.objects.submit("q", 6, unique_key="invoice:7"),
    }
    Task.objects.submit("q", 7, locks=["invoice:8"])
    Task.objects.submit("q", 8)

    def rns(key: str) -> set[str]:
        response = operator.get(f"{API}/tasks/", {"key": key})
        assert response.status_code == 200, response.content
        return {t["rn"] for t in response.json()["results"]}

    wanted = {named[k].rn for k in ("lock", "shared", "order", "unique")}
    assert rns("invoice:7") == wanted
    assert rns("stripe") == {named["limit"].rn}
    assert rns("sms") == {named["rate"].rn}
    assert rns("nothing") == set()
    assert_field_error(operator.get(f"{API}/tasks/", {"key": ""}), "key", "blank")
    assert_field_error(operator.get(f"{API}/tasks/", {"key": "x" * 201}), "key", "max_length")
    nul = operator.get(f"{API}/tasks/?key=a%00b")
    assert_field_error(nul, "key", "null_characters_not_allowed")


def test_bulk_cancel_takes_the_key_filter(operator):
    keyed = Task.objects.submit("q", 1, locks=["invoice:7"])
    other = Task.objects.submit("q", 2)
    response = post(operator, "/bulk/tasks/cancel/", {"filter": {"key": "invoice:7"}})
    assert response.status_code == 403  # cancelling needs cancel_task
    canceller = client_for(make_user("canceller", "view_task", "cancel_task"))
    response = post(canceller, "/bulk/tasks/cancel/", {"filter": {"key": "invoice:7"}})
    assert response.json()["cancelled"] == 1, response.content
    assert Task.objects.get(pk=keyed.pk).status == "cancelled"
    assert Task.objects.get(pk=other.pk).status == "ready"
