"""The admin's batch pages (progress from the counters, callbacks, cancel) and dead letters
(the task list's filter, "Discard selected", the dashboard's count)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now
from django.urls import reverse

from scylla_django.batches import Batch
from scylla_django.enums import Status
from scylla_django.models import Batch as BatchRow
from scylla_django.models import Task, Worker
from scylla_django.models.serving import forget_live_worker_queues
from tests.factories import running_task
from tests.helpers import messages_of, staff

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:scylla_django_task_changelist")
BATCHES = reverse("admin:scylla_django_batch_changelist")


def make_batch(worker: Worker, size: int = 4, complete: int = 1) -> BatchRow:
    forget_live_worker_queues()  # `worker` serves the callback's queue: read it afresh
    with Batch(on_success=("default", {"report": True})) as batch:
        for n in range(size):
            batch.submit("default", {"n": n}, priority=200 - n)
    for task in Task.objects.lease(worker, ["default"], limit=complete):
        task.complete(worker, {"n": task.spec["n"]})
    assert batch.row is not None
    batch.row.refresh_from_db()
    return batch.row


def dead_letter(worker: Worker, rn: str, queue: str = "default") -> Task:
    task = running_task(worker, rn=rn, queue=queue)
    task.abort(worker, [{"code": "card_declined", "args": {}, "description": "no"}])
    return task


def test_the_batch_list_and_page_show_progress_and_callbacks(admin_client, worker):
    row = make_batch(worker)
    html = admin_client.get(BATCHES).content.decode()
    assert "1 / 4" in html
    assert 'data-state="running"' in html
    page = admin_client.get(reverse("admin:scylla_django_batch_change", args=[row.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "on_success" in html and "(held)" in html
    assert f"?batch={row.pk}" in html
    # The tasks of the batch, through the task list's batch filter.
    listed = admin_client.get(TASKS, {"batch": str(row.pk)})
    assert listed.status_code == 200
    assert len(listed.context["cl"].result_list) == 4
    # A value that names no batch is a bad lookup: Django sends the list back with ?e=1.
    assert admin_client.get(TASKS, {"batch": "x"}).status_code == 302


def test_cancel_selected_batches(admin_client, worker):
    row = make_batch(worker)
    response = admin_client.post(
        BATCHES, {"action": "cancel_selected", "_selected_action": [row.pk]}, follow=True
    )
    assert messages_of(response) == [
        "1 batches cancelled (3 tasks), 0 skipped (cancelled already)."
    ]
    row.refresh_from_db()
    assert (row.state, row.failed) == ("cancelled", 3)
    viewer = staff("view_task")
    assert viewer.get(BATCHES).status_code == 200
    assert "cancel_selected" not in viewer.get(BATCHES).content.decode()


def test_the_dead_letter_list_filters_discards_and_the_dashboard_counts(admin_client, worker):
    dead_letter(worker, "old-dead", queue="billing")
    dead_letter(worker, "new-dead")
    running_task(worker, rn="fine").complete(worker)
    Task.objects.filter(rn="old-dead").update(dead=Now() - timedelta(days=3))

    def listed(**params: str) -> set[str]:
        response = admin_client.get(TASKS, params)
        assert response.status_code == 200
        return {task.rn for task in response.context["cl"].result_list}

    assert listed(dead="yes") == {"old-dead", "new-dead"}
    assert listed(dead="1d") == {"old-dead"}
    assert listed(dead="yes", queue="billing") == {"old-dead"}
    assert listed(dead="yes", error_code="card_declined") == {"old-dead", "new-dead"}

    dashboard = admin_client.get(reverse("admin:scylla_django_task_dashboard")).content.decode()
    assert 'id="scylla-dead-count">2</a>' in dashboard

    fine = Task.objects.get(rn="fine")
    new = Task.objects.get(rn="new-dead")
    response = admin_client.post(
        TASKS,
        {"action": "discard_selected", "_selected_action": [new.pk, fine.pk]},
        follow=True,
    )
    assert messages_of(response) == ["1 discarded, 1 skipped (not dead letters)."]
    assert listed(dead="yes") == {"old-dead"}
    page = admin_client.get(reverse("admin:scylla_django_task_change", args=[new.pk]))
    assert "dead letter since" in page.content.decode().lower()
    assert Task.objects.get(rn="new-dead").status == Status.ABORTED
