"""Subprocess entry point of `tests/faults/test_replica_reads.py`.

    python -m tests.replica_child

Django runs with two aliases: `default`, a private primary, and `replica`, its streaming replica
(`SCYLLA["READ_DATABASE"] = "replica"`). With the replica's replay paused, the admin's pages and
the API's GETs show the replica's past while submissions, leases, transitions and the monitor go
to the primary; an AssertionError (exit status 1) says what went wrong, "ok" that all held.
"""

from __future__ import annotations

import sys
import time

JSON = {"content_type": "application/json"}


def wait_until(condition: object, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def main() -> int:
    import django

    django.setup()

    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.test import Client
    from django.urls import reverse

    from scylla_django.models import Task, Worker
    from scylla_django.monitor import Monitor

    replica = connections["replica"]

    def replica_query(sql: str) -> object:
        with replica.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchone()[0]

    assert replica_query("SELECT pg_is_in_recovery()") is True
    user = get_user_model().objects.create_superuser("admin", "admin@example.com", "pw")
    client = Client()
    client.force_login(user)

    def api_rns() -> set[str]:
        response = client.get("/api/scylla/tasks/", {"queue": "replicas"})
        assert response.status_code == 200, response.content
        return {row["rn"] for row in response.json()["results"]}

    def admin_list() -> str:
        response = client.get(reverse("admin:scylla_django_task_changelist"))
        assert response.status_code == 200, response.content
        return response.content.decode()

    # A submission through the API goes to the primary, and the replica catches up.
    response = client.post(
        "/api/scylla/tasks/",
        {"queue": "replicas", "spec": {"n": 1}},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    first = response.json()["rn"]
    wait_until(lambda: first in api_rns(), "the replica to replay the first task")

    with replica.cursor() as cursor:
        cursor.execute("SELECT pg_wal_replay_pause()")
    wait_until(lambda: replica_query("SELECT pg_get_wal_replay_pause_state()") == "paused", "pause")

    # Writes while replay is paused: a submission, a lease and a cancellation, all on the
    # primary (the replica is read-only: any of them there would fail).
    response = client.post(
        "/api/scylla/tasks/",
        {"queue": "replicas", "spec": {"n": 2}},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    second = response.json()["rn"]
    worker = Worker.objects.register(queues=["replicas"], capacity=2)
    leased = Task.objects.lease(worker, ["replicas"], limit=2)
    assert {task.rn for task in leased} == {first, second}, leased
    response = client.post(f"/api/scylla/tasks/{second}/cancel/", **JSON)
    assert response.status_code == 200, response.content
    monitor = Monitor(interval=1.0)
    monitor.run(once=True)
    assert monitor.last_pass is not None
    # The health check reads the primary: the monitor registered there after the pause.
    health = client.get("/api/scylla/health/", {"monitor": "true"})
    assert health.status_code == 200, health.content

    # The reads lag: the API's list and task, the admin's list and page show the past.
    assert api_rns() == {first}, api_rns()
    response = client.get(f"/api/scylla/tasks/{first}/")
    assert response.status_code == 200 and response.json()["status"] == "ready", response.content
    assert client.get(f"/api/scylla/tasks/{second}/").status_code == 404
    listing = admin_list()
    assert first in listing and second not in listing
    primary_task = Task.objects.using("default").get(rn=first)
    assert primary_task.status == "running"
    page = client.get(reverse("admin:scylla_django_task_change", args=[primary_task.pk]))
    assert page.status_code == 200, page.content
    text = page.content.decode()
    assert "Read from the replica &#x27;replica&#x27;" in text or "Read from the replica" in text
    assert "replay is paused" in text, text
    dashboard = client.get(reverse("admin:scylla_django_task_dashboard"))
    assert dashboard.status_code == 200, dashboard.content

    # Replay resumes: the reads catch up.
    with replica.cursor() as cursor:
        cursor.execute("SELECT pg_wal_replay_resume()")
    wait_until(lambda: api_rns() == {first, second}, "the replica to replay the writes")
    page = client.get(reverse("admin:scylla_django_task_change", args=[primary_task.pk]))
    assert "replay is paused" not in page.content.decode()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
