"""Queue control: pause and resume, and a limit on a queue's running tasks, enforced by the
lease itself (on the database, from the API and from `manage.py scylla_queue`)."""

from __future__ import annotations

import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scylla_django.enums import Status
from scylla_django.models import QueueSetting, Task, Worker
from tests.helpers import assert_error, assert_field_error, client_for, make_user

API = "/api/scylla"


def rns(tasks: list[Task]) -> list[str]:
    return [task.rn for task in tasks]


@pytest.mark.django_db
def test_pause_stops_leasing_at_once_and_resume_restarts_it(worker):
    Task.objects.submit("mail", {}, rn="m1", priority=9)
    Task.objects.submit("pdf", {}, rn="p1", priority=1)
    QueueSetting.objects.pause("mail")
    assert rns(Task.objects.lease(worker, ["mail", "pdf"], limit=5)) == ["p1"]
    assert Task.objects.lease(worker, ["mail"]) == []
    outcome = Task.objects.submit("mail", {}, rn="m2")  # a paused queue still takes tasks
    assert outcome.status == Status.READY
    QueueSetting.objects.resume("mail")
    assert rns(Task.objects.lease(worker, ["mail"], limit=5)) == ["m1", "m2"]


@pytest.mark.django_db
def test_a_limit_caps_the_running_tasks_of_a_queue_across_workers(worker, other_worker):
    for n in range(6):
        Task.objects.submit("mail", {}, rn=f"m{n}")
    Task.objects.submit("pdf", {}, rn="p0")
    QueueSetting.objects.limit("mail", 3)
    assert rns(Task.objects.lease(worker, ["mail"], limit=2)) == ["m0", "m1"]
    # One slot left for mail; pdf is not limited.
    assert rns(Task.objects.lease(other_worker, ["mail", "pdf"], limit=4)) == ["m2", "p0"]
    assert Task.objects.lease(other_worker, ["mail"], limit=4) == []
    Task.objects.get_by_rn("m0").complete(worker)
    assert rns(Task.objects.lease(other_worker, ["mail"], limit=4)) == ["m3"]
    QueueSetting.objects.pause("mail")  # paused wins over the room left
    Task.objects.get_by_rn("m1").complete(worker)
    assert Task.objects.lease(other_worker, ["mail"]) == []
    QueueSetting.objects.resume("mail")
    QueueSetting.objects.limit("mail", None)
    assert rns(Task.objects.lease(other_worker, ["mail"], limit=4)) == ["m4", "m5"]


@pytest.mark.django_db
@pytest.mark.parametrize("value", [0, -1, True, 1.5, "3", 1_000_001])
def test_a_bad_limit_is_refused(value):
    with pytest.raises(ValidationError):
        QueueSetting.objects.limit("mail", value)
    with pytest.raises(ValidationError):
        QueueSetting.objects.pause("-bad")


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_lease_stays_one_statement_with_paused_queues(worker):
    Task.objects.submit("a", {}, rn="a1")
    QueueSetting.objects.pause("b")
    with CaptureQueriesContext(connection) as captured:
        assert rns(Task.objects.lease(worker, ["a", "b"])) == ["a1"]
    assert len(captured.captured_queries) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_limit_is_never_exceeded_by_eight_concurrent_lessees():
    """8 threads, each its own connection, lease and complete as fast as they can from a queue
    limited to 3; a watcher samples the running count. Never more than 3 run at once."""
    limit, lessees = 3, 8
    Task.objects.submit_many({"queue": "hot", "spec": {"n": n}} for n in range(200))
    QueueSetting.objects.limit("hot", limit)
    workers = [Worker.objects.register(["hot"], capacity=4) for _ in range(lessees)]
    start, done = threading.Barrier(lessees + 1), threading.Event()
    peaks: list[int] = []
    errors: list[BaseException] = []

    def lessee(worker: Worker) -> None:
        try:
            start.wait(30)
            idle = 0
            while idle < 20:
                leased = Task.objects.lease(worker, ["hot"], limit=2)
                running = Task.objects.filter(queue="hot", status=Status.RUNNING).count()
                peaks.append(running)
                idle = 0 if leased else idle + 1
                for task in leased:
                    task.complete(worker)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=lessee, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    start.wait(30)
    try:
        while any(t.is_alive() for t in threads):
            peaks.append(Task.objects.filter(queue="hot", status=Status.RUNNING).count())
    finally:
        done.set()
        for thread in threads:
            thread.join(60)
    assert errors == []
    assert Task.objects.filter(queue="hot", status=Status.COMPLETED).count() == 200
    assert max(peaks) <= limit
    assert max(peaks) == limit  # the limit was reached, so the test could have failed


# -- the API ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_pauses_resumes_and_limits_a_queue(worker):
    api = client_for(make_user("operator", "view_task", "control_queue"))
    Task.objects.submit("mail", {}, rn="m1")
    response = api.put(f"{API}/queues/mail/pause/")
    assert response.status_code == 200, response.content
    assert response.json()["paused"] is True
    assert api.get(f"{API}/queues/mail/pause/").json()["paused"] is True
    assert Task.objects.lease(worker, ["mail"]) == []
    response = api.delete(f"{API}/queues/mail/pause/")
    assert (response.status_code, response.json()["paused"]) == (200, False)
    response = api.put(f"{API}/queues/mail/limit/", {"max_running": 2}, format="json")
    assert (response.status_code, response.json()["max_running"]) == (200, 2)
    assert_field_error(
        api.put(f"{API}/queues/mail/limit/", {"max_running": 0}, format="json"),
        "max_running",
        "min_value",
    )
    response = api.put(f"{API}/queues/mail/limit/", {"max_running": None}, format="json")
    assert response.json()["max_running"] is None
    assert rns(Task.objects.lease(worker, ["mail"])) == ["m1"]
    assert_error(api.put(f"{API}/queues/-bad/pause/"), 404, "queue_not_found")


@pytest.mark.django_db
def test_api_queue_control_needs_its_permission():
    viewer = client_for(make_user("viewer", "view_task"))
    assert viewer.get(f"{API}/queues/mail/pause/").status_code == 200
    assert_error(viewer.put(f"{API}/queues/mail/pause/"), 403, "permission_denied")
    assert_error(viewer.delete(f"{API}/queues/mail/pause/"), 403, "permission_denied")
    assert client_for(None).put(f"{API}/queues/mail/pause/").status_code == 401
    assert not QueueSetting.objects.filter(queue="mail").exists()


# -- the command -----------------------------------------------------------------------------


def run(*args: str) -> str:
    out = StringIO()
    call_command("scylla_queue", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_command_pauses_resumes_limits_and_lists(worker):
    Task.objects.submit("mail", {}, rn="m1")
    assert run("pause", "mail") == "mail (paused)\n"
    assert Task.objects.lease(worker, ["mail"]) == []
    assert run("limit", "mail", "5") == "mail (paused, at most 5 running)\n"
    listed = run("list")
    assert "mail" in listed and "paused" in listed and "max_running=5" in listed
    assert "1 ready" in listed
    assert run("resume", "mail") == "mail (active, at most 5 running)\n"
    assert run("limit", "mail", "--none") == "mail (active)\n"
    assert rns(Task.objects.lease(worker, ["mail"])) == ["m1"]
    with pytest.raises(CommandError):
        run("pause", "-bad")
    with pytest.raises(CommandError):
        run("limit", "mail", "0")


def test_command_list_does_not_count_a_held_follow_up_or_a_later_task_as_ready(worker):
    Task.objects.submit("etl", {}, rn="extract")
    Task.objects.submit("etl", {}, rn="load", after=["extract"])
    Task.objects.submit("etl", {}, rn="tomorrow", not_before=timezone.now() + timedelta(days=1))
    [line] = run("list").splitlines()
    assert line.split() == [
        "etl",
        "active",
        "1",
        "ready",
        "1",
        "waiting",
        "for",
        "parents",
        "1",
        "scheduled",
    ]
    QueueSetting.objects.limit("etl", 2)
    assert run("list").split()[-1] == "max_running=2"
