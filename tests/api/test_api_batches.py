"""The API of batches (submit with callbacks, progress, results in pages, cancel) and of dead
letters (list, requeue, discard)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from scylla_django.batches import release_callbacks
from scylla_django.enums import Status
from scylla_django.models import Batch, Outcome, Task, Worker
from scylla_django.models.serving import forget_live_worker_queues
from tests.helpers import API, assert_error, assert_field_error, post

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def crew(db) -> Worker:
    forget_live_worker_queues()
    worker = Worker.objects.register(queues=["work", "done"], capacity=4, hostname="t", pid=1)
    yield worker
    forget_live_worker_queues()


def finish_all(worker: Worker, fail: int = 0) -> None:
    leased = Task.objects.lease(worker, ["work"], limit=1000)
    outcomes = [
        Outcome(
            t.pk,
            t.leases,
            result={"n": t.spec["n"]},
            errors=[{"code": "broken"}] if i < fail else None,
        )
        for i, t in enumerate(sorted(leased, key=lambda t: t.spec["n"]))
    ]
    Task.objects.finish_many(worker, outcomes)


def test_submit_a_batch_read_its_progress_and_results_in_pages(api, crew):
    body = {
        "tasks": [{"queue": "work", "spec": {"n": n}} for n in range(5)],
        "on_success": {"queue": "done", "spec": {"report": True}, "priority": 9},
    }
    response = post(api, "/batches/", body)
    assert response.status_code == 201, response.content
    batch = response.json()
    assert (batch["total"], batch["done"], batch["state"]) == (5, 0, "running")
    assert [o["outcome"] for o in batch["outcomes"]] == ["inserted"] * 5
    assert batch["on_success"], batch
    callback = Task.objects.get(rn=batch["on_success"])
    assert (callback.queue, callback.priority) == ("done", 9)
    task = api.get(f"{API}/tasks/{batch['outcomes'][0]['rn']}/").json()
    assert task["batch"] == batch["id"]

    finish_all(crew)
    release_callbacks()
    got = api.get(f"{API}/batches/{batch['id']}/").json()
    assert (got["done"], got["completed"], got["state"]) == (5, 5, "completed")
    assert got["closed"] is not None

    first = api.get(f"{API}/batches/{batch['id']}/results/", {"page_size": 3}).json()
    assert [r["result"] for r in first["results"]] == [{"n": 0}, {"n": 1}, {"n": 2}]
    rest = api.get(
        f"{API}/batches/{batch['id']}/results/", {"page_size": 3, "after": first["next"]}
    ).json()
    assert [r["result"] for r in rest["results"]] == [{"n": 3}, {"n": 4}]
    assert rest["next"] is None
    results = f"{API}/batches/{batch['id']}/results/"
    assert_field_error(api.get(results, {"after": "x"}), "after", "invalid")
    assert_field_error(api.get(results, {"page_size": "0"}), "page_size", "invalid")


def test_cancel_a_batch_over_the_api(api, crew):
    response = post(api, "/batches/", {"tasks": [{"queue": "work", "spec": {"n": 1}}]})
    batch = response.json()
    response = post(api, f"/batches/{batch['id']}/cancel/", {})
    assert response.status_code == 200, response.content
    assert (response.json()["state"], response.json()["failed"]) == ("cancelled", 1)
    assert_error(post(api, f"/batches/{batch['id']}/cancel/", {}), 409, "invalid_transition")


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        (
            {"tasks": [{"queue": "work", "spec": 1}], "on_success": {"queue": "nope", "spec": 1}},
            "on_success",
            "unknown_queue",
        ),
        ({"tasks": []}, "tasks", "min_length"),
        ({"tasks": [{"queue": "work"}]}, "tasks", "required"),
        ({"tasks": [{"queue": "work", "spec": 1, "after": ["x"]}]}, "tasks", "unknown_field"),
        (
            {"tasks": [{"queue": "work", "spec": 1}], "on_failure": {"queue": "done"}},
            "on_failure",
            "required",
        ),
        ({"tasks": [{"queue": "work", "spec": 1}], "extra": 1}, "extra", "unknown_field"),
    ],
)
def test_a_bad_batch_is_a_400_and_nothing_is_written(api, crew, body, field, code):
    response = post(api, "/batches/", body)
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert any(name.startswith(field) for name in errors), errors
    assert code in str(errors), errors
    assert not Batch.objects.exists()
    assert not Task.objects.exists()


def test_an_unknown_batch_is_a_404(api):
    assert_error(api.get(f"{API}/batches/123456/"), 404, "batch_not_found")
    assert_error(post(api, "/batches/99/cancel/", {}), 404, "batch_not_found")
    assert_error(api.get(f"{API}/batches/1/results/"), 404, "batch_not_found")


def test_dead_letters_listed_filtered_requeued_and_discarded(api, crew):
    post(api, "/batches/", {"tasks": [{"queue": "work", "spec": {"n": n}} for n in range(3)]})
    finish_all(crew, fail=2)
    dead = api.get(f"{API}/tasks/", {"dead": "true"}).json()["results"]
    assert len(dead) == 2 and all(t["dead"] for t in dead)
    assert (
        len(api.get(f"{API}/tasks/", {"dead": "true", "error_code": "broken"}).json()["results"])
        == 2
    )
    assert api.get(f"{API}/tasks/", {"dead": "true", "queue": "other"}).json()["results"] == []
    Task.objects.filter(rn=dead[0]["rn"]).update(dead=Now() - timedelta(days=3))
    old = api.get(f"{API}/tasks/", {"dead": "true", "dead_before": "2100-01-01T00:00:00Z"}).json()[
        "results"
    ]
    assert len(old) == 2
    assert_field_error(api.get(f"{API}/tasks/", {"dead": "maybe"}), "dead", "invalid_choice")

    requeued = post(api, f"/tasks/{dead[0]['rn']}/retry/", {})
    assert requeued.status_code == 201, requeued.content
    assert requeued.json()["retry_of"] == dead[0]["rn"]
    discarded = post(api, f"/tasks/{dead[1]['rn']}/discard/", {})
    assert discarded.status_code == 200, discarded.content
    assert discarded.json()["dead"] is None
    assert api.get(f"{API}/tasks/", {"dead": "true"}).json()["results"] == []
    assert_error(post(api, f"/tasks/{dead[1]['rn']}/discard/", {}), 409, "invalid_transition")
    assert Task.objects.get(rn=dead[1]["rn"]).status == Status.ABORTED


def test_an_invalid_task_in_a_batch_is_a_400_naming_it_and_nothing_is_written(api, crew):
    body = {
        "tasks": [
            {"queue": "work", "spec": 1},
            {"queue": "work", "spec": 2, "unique_key": "k" * 201},
        ],
        "on_success": {"queue": "done", "spec": {}},
    }
    response = post(api, "/batches/", body)
    assert response.status_code == 400, response.content
    assert set(response.json()["errors"]) == {"tasks.1.unique_key"}
    assert not Batch.objects.exists()
    assert not Task.objects.exists()
