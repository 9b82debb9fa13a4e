"""Who may do what: every route against every kind of caller, each cell asserted.

- anonymous: no credentials (401);
- client: view, submit and cancel tasks;
- worker: may work (`work_task`) and registered the worker W that holds the task;
- other worker: may work too, but registered another worker, and names W;
- staff: a staff operator with all four permissions, who may act as any worker.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from scylla_django.enums import Status
from scylla_django.models import Task, Worker
from tests.factories import TaskFactory, running_task
from tests.helpers import (
    ALL_PERMISSIONS,
    API,
    CLIENT_PERMISSIONS,
    assert_error,
    client_for,
    make_user,
    worker_of,
)

pytestmark = pytest.mark.django_db

CALLERS = ("anonymous", "client", "worker", "other_worker", "staff")
ABORT = {"errors": [{"code": "x"}]}

# route: (method, path, body, success status, who succeeds). "W" is the worker's name.
ROUTES = {
    "list": ("get", "/tasks/", None, 200, {"client", "staff"}),
    "submit": ("post", "/tasks/", {"queue": "q", "spec": 1}, 201, {"client", "staff"}),
    "bulk": ("post", "/bulk/tasks/", [{"queue": "q", "spec": 1}], 200, {"client", "staff"}),
    "detail": ("get", "/tasks/ready/", None, 200, {"client", "staff"}),
    "cancel": ("post", "/tasks/ready/cancel/", {}, 200, {"client", "staff"}),
    "queues": ("get", "/queues/", None, 200, {"client", "staff"}),
    "schema": ("get", "/schema/", None, 200, {"client", "worker", "other_worker", "staff"}),
    "register": ("post", "/workers/", {"queues": ["q"]}, 201, {"worker", "other_worker", "staff"}),
    "lease": ("post", "/workers/W/lease/", {}, 200, {"worker", "staff"}),
    "heartbeat": ("post", "/tasks/running/heartbeat/", {}, 200, {"worker", "staff"}),
    "complete": ("post", "/tasks/running/complete/", {}, 200, {"worker", "staff"}),
    "abort": ("post", "/tasks/running/abort/", ABORT, 200, {"worker", "staff"}),
    "yield": ("post", "/tasks/running/yield/", {}, 200, {"worker", "staff"}),
    "snooze": ("post", "/tasks/running/snooze/", {"delay": 5}, 200, {"worker", "staff"}),
}
WORKER_ROUTES = {"heartbeat", "complete", "abort", "yield", "snooze"}


@pytest.fixture
def callers() -> dict[str, User | None]:
    return {
        "anonymous": None,
        "client": make_user("client", *CLIENT_PERMISSIONS),
        "worker": make_user("worker", "work_task"),
        "other_worker": make_user("other", "work_task"),
        "staff": make_user("staff", *ALL_PERMISSIONS, is_staff=True),
    }


def expected(route: str, caller: str) -> tuple[int, str | None]:
    """The status and error code that `caller` gets on `route`."""
    _, _, _, success, allowed = ROUTES[route]
    if caller == "anonymous":
        return 401, "not_authenticated"
    if caller in allowed:
        return success, None
    if caller == "other_worker" and (route in WORKER_ROUTES or route == "lease"):
        return 403, "not_your_worker"
    return 403, "permission_denied"


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_permission_matrix(callers, route, caller):
    w = worker_of(callers["worker"])
    worker_of(callers["other_worker"])
    running = running_task(w, rn="running")
    TaskFactory(rn="ready")
    method, path, body, _, _ = ROUTES[route]
    if route in WORKER_ROUTES:
        body = {"worker": w.name, "lease": 1, **body}
    tasks_before = set(Task.objects.values_list("rn", "status"))
    workers_before = Worker.objects.count()

    response = getattr(client_for(callers[caller]), method)(
        f"{API}{path.replace('/W/', f'/{w.name}/')}", body, format="json"
    )

    status, code = expected(route, caller)
    if code is None:
        assert response.status_code == status, response.content
        return
    assert_error(response, status, code)
    assert set(Task.objects.values_list("rn", "status")) == tasks_before
    assert Worker.objects.count() == workers_before
    assert Task.objects.get(pk=running.pk).status == Status.RUNNING


def test_anonymous_is_told_how_to_authenticate():
    response = client_for(None).get(f"{API}/tasks/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("header", ["Token wrong", "Token a\x00b", "Token", "Bearer x"])
def test_a_bad_token_is_401(header):
    make_user("client", *CLIENT_PERMISSIONS)
    client = client_for(None)
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(f"{API}/tasks/")
    assert response.status_code == 401
    assert response.json()["code"] in {"authentication_failed", "not_authenticated"}


def test_a_session_authenticates_and_needs_csrf_to_write():
    user = make_user("client", *CLIENT_PERMISSIONS)
    client = client_for(None)
    client.force_login(user)
    assert client.get(f"{API}/tasks/").status_code == 200
    strict = type(client)(enforce_csrf_checks=True)
    strict.force_login(user)
    response = strict.post(f"{API}/tasks/", {"queue": "q", "spec": 1}, format="json")
    assert_error(response, 403, "permission_denied")
    assert "CSRF" in response.json()["detail"]
    assert not Task.objects.exists()


def test_a_worker_names_its_own_worker_for_a_task_another_holds_and_gets_lease_lost():
    owner, other = make_user("owner", "work_task"), make_user("other", "work_task")
    task = running_task(worker_of(owner), rn="t1")
    theirs = worker_of(other)
    response = client_for(other).post(
        f"{API}/tasks/t1/complete/", {"worker": theirs.name, "lease": 1}, format="json"
    )
    assert_error(response, 409, "lease_lost")
    assert Task.objects.get(pk=task.pk).status == Status.RUNNING


def test_staff_status_alone_grants_nothing():
    staff = make_user("staff", is_staff=True)
    worker = worker_of(make_user("owner", "work_task"))
    client = client_for(staff)
    assert_error(client.get(f"{API}/tasks/"), 403, "permission_denied")
    assert_error(client.post(f"{API}/workers/{worker.name}/lease/"), 403, "permission_denied")


def test_a_non_staff_user_with_work_task_cannot_act_as_a_local_worker():
    """Workers registered by `manage.py scylla_worker` have no user: only operators act as them."""
    local = Worker.objects.register(queues=["default"])
    user = make_user("worker", "work_task")
    response = client_for(user).post(f"{API}/workers/{local.name}/lease/")
    assert_error(response, 403, "not_your_worker")
    staff = make_user("staff", "work_task", is_staff=True)
    assert client_for(staff).post(f"{API}/workers/{local.name}/lease/").status_code == 200


def test_a_superuser_may_do_everything():
    superuser = User.objects.create_superuser("root", password="pw")
    worker = worker_of(make_user("owner", "work_task"))
    running_task(worker, rn="t1")
    client = client_for(superuser)
    assert client.get(f"{API}/tasks/").status_code == 200
    response = client.post(
        f"{API}/tasks/t1/complete/", {"worker": worker.name, "lease": 1}, format="json"
    )
    assert response.status_code == 200
