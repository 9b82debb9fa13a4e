"""Subprocess entry point of `tests/faults/test_queue_databases.py`.

    python -m tests.routed_child submit N      # N tasks of each queue; prints their rns (JSON)
    python -m tests.routed_child read          # what the API and the admin show of each database

Django runs with two aliases, `default` and `second`, and `SCYLLA["QUEUE_DATABASES"]` sends the
queue `t-sleep` to `second` (`routers.QueueRouter`).
"""

from __future__ import annotations

import json
import sys


def submit(count: int) -> dict[str, list[str]]:
    from scylla_django.models import Task

    near = [Task.objects.submit("t-echo", {"n": n}).rn for n in range(count)]
    far = [Task.objects.submit("t-sleep", {"seconds": 0.05}).rn for _ in range(count)]
    # One submit_many across both databases: each task lands in its queue's.
    outcomes = Task.objects.submit_many(
        [
            {"queue": "t-echo", "spec": {"n": "bulk"}},
            {"queue": "t-sleep", "spec": {"seconds": 0.05}},
        ]
    )
    assert [outcome.index for outcome in outcomes] == [0, 1], outcomes
    assert {outcome.outcome for outcome in outcomes} == {"inserted"}, outcomes
    near.append(str(outcomes[0].rn))
    far.append(str(outcomes[1].rn))
    return {"near": near, "far": far}


def read() -> dict[str, object]:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    user = get_user_model().objects.create_superuser("admin", "admin@example.com", "pw")
    client = Client()
    client.force_login(user)
    seen: dict[str, object] = {}
    for database in ("default", "second"):
        response = client.get("/api/scylla/tasks/", {"database": database, "page_size": 100})
        assert response.status_code == 200, response.content
        seen[f"api_{database}"] = sorted(row["rn"] for row in response.json()["results"])
        page = client.get(reverse("admin:scylla_django_task_changelist"), {"database": database})
        assert page.status_code == 200, page.content
        seen[f"admin_{database}"] = page.content.decode()
        dashboard = client.get(
            reverse("admin:scylla_django_task_dashboard"), {"database": database}
        )
        assert dashboard.status_code == 200, dashboard.content
    # The admin keeps the database last named: its links and buttons stay on it.
    changelist = reverse("admin:scylla_django_task_changelist")
    seen["admin_remembered"] = client.get(changelist).content.decode()
    seen["dashboard_remembered"] = client.get(
        reverse("admin:scylla_django_task_dashboard")
    ).content.decode()
    client.get(changelist, {"database": "default"})
    seen["admin_back"] = client.get(changelist).content.decode()
    seen["metrics_second"] = client.get("/metrics", {"database": "second"}).content.decode()
    plain = client.get("/api/scylla/tasks/", {"page_size": 100})
    seen["api_plain"] = sorted(row["rn"] for row in plain.json()["results"])
    unknown = client.get("/api/scylla/tasks/", {"database": "nowhere"})
    seen["api_unknown"] = [unknown.status_code, unknown.json()]
    seen["admin_unknown"] = client.get(
        reverse("admin:scylla_django_task_changelist"), {"database": "nowhere"}
    ).status_code
    return seen


def main(mode: str, *args: str) -> int:
    import django

    django.setup()
    result = submit(int(args[0])) if mode == "submit" else read()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
