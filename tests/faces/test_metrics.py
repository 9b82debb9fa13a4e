"""Prometheus metrics: the scrape, parsed with prometheus_client's own parser, and its values;
events counted in a worker process and read back in multi-process mode."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from scylla_django import metrics
from scylla_django.models import Monitor, Outcome, Task, Worker
from scylla_django.monitor import Monitor as MonitorLoop
from tests.factories import TaskFactory, running_task
from tests.helpers import Stopwatch
from tests.processes import finish, start

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.django_db
def test_tasks_by_queue_and_status_and_the_oldest_ready_age(client, worker):
    running_task(worker, queue="reports", rn="r1")
    running_task(worker, queue="emails", rn="e3").complete(worker)
    gone = running_task(worker, queue="emails", rn="e4")
    gone.abort(worker, [{"code": "x", "args": {}, "description": ""}])
    for n in range(3):
        TaskFactory(queue="emails", rn=f"e{n}")
    clock = Stopwatch()
    TaskFactory(queue="reports", rn="r0")
    TaskFactory(queue="reports", rn="later")
    Task.objects.filter(rn="e0").update(created=Now() - timedelta(seconds=90))
    # A delayed task waits from its not_before, and not at all before it.
    Task.objects.filter(rn="later").update(
        created=Now() - timedelta(hours=1), not_before=Now() + timedelta(hours=1)
    )

    samples = scrape(client)
    expected = {
        ("emails", "ready"): 3,
        ("emails", "running"): 0,
        ("emails", "completed"): 1,
        ("emails", "aborted"): 1,
        ("emails", "cancelled"): 0,
        ("reports", "ready"): 2,
        ("reports", "running"): 1,
        ("reports", "completed"): 0,
    }
    for (queue, status), count in expected.items():
        assert value(samples, "scylla_tasks", queue=queue, status=status) == count, (queue, status)
    assert clock.bounds(value(samples, "scylla_queue_oldest_ready_age_seconds", queue="emails"), 90)
    assert clock.bounds(value(samples, "scylla_queue_oldest_ready_age_seconds", queue="reports"), 0)


@pytest.mark.django_db
def test_terminal_counts_past_the_cap_are_estimated_on_postgresql(client, worker, monkeypatch):
    monkeypatch.setattr(metrics, "TERMINAL_COUNT_CAP", 2)
    for n in range(5):
        running_task(worker, rn=f"c{n}").complete(worker)
    running_task(worker, rn="c5").cancel()
    running_task(worker, queue="other", rn="o1").complete(worker)
    samples = scrape(client)
    count = value(samples, "scylla_tasks", queue="default", status="completed")
    if connection.vendor == "postgresql":
        assert count == 2  # no statistics yet: never below what was counted
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE scylla_django_task")
        samples = scrape(client)
        # 7 rows: "default" 6/7 of them, "completed" 6/7, taken as independent: 5.1.
        count = value(samples, "scylla_tasks", queue="default", status="completed")
        assert count == 5
    else:
        assert count == 5
    assert value(samples, "scylla_tasks", queue="default", status="cancelled") == 1
    assert value(samples, "scylla_tasks", queue="other", status="completed") == 1


@pytest.mark.django_db
def test_workers_and_monitors_by_state_and_the_last_pass(client, worker, other_worker):
    Worker.objects.filter(pk=other_worker.pk).update(silent_at=Now() - timedelta(seconds=1))
    samples = scrape(client)
    assert value(samples, "scylla_workers", state="alive") == 1
    assert value(samples, "scylla_workers", state="silent") == 1
    assert value(samples, "scylla_workers", state="dead") == 0
    assert value(samples, "scylla_monitor_missing") == 1
    assert ("scylla_monitor_last_pass_timestamp_seconds", ()) not in samples

    MonitorLoop(interval=5).run_once()
    samples = scrape(client)
    assert value(samples, "scylla_monitor_missing") == 0
    assert value(samples, "scylla_monitors", state="alive") == 1
    stamp = Monitor.objects.get().last_pass.timestamp()
    assert value(samples, "scylla_monitor_last_pass_timestamp_seconds") == pytest.approx(stamp)


@pytest.mark.django_db(transaction=True)
def test_event_counters_and_the_run_time_histogram(client, worker):
    before = scrape(client)
    clock = Stopwatch()
    leased = [running_task(worker, queue="m-q", rn=f"m{n}") for n in range(3)]
    leased[0].complete(worker)
    leased[1].abort(worker, [{"code": "x", "args": {}, "description": ""}])
    leased[2].cancel()
    reset = running_task(worker, queue="m-q", rn="m-reset")
    Worker.objects.filter(pk=worker.pk).update(silent_at=Now() - timedelta(seconds=1))
    reset.reset_lease(worker.name, 1)
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("scylla_tasks_leased_total", queue="m-q") == 4
    assert delta("scylla_tasks_finished_total", queue="m-q", status="completed") == 1
    assert delta("scylla_tasks_finished_total", queue="m-q", status="aborted") == 1
    assert delta("scylla_tasks_finished_total", queue="m-q", status="cancelled") == 1
    assert delta("scylla_leases_reset_total", queue="m-q") == 1
    assert delta("scylla_task_run_seconds_count", queue="m-q", status="completed") == 1
    assert delta("scylla_task_run_seconds_count", queue="m-q", status="aborted") == 1
    assert delta("scylla_task_run_seconds_count", queue="m-q", status="cancelled") == 0
    assert clock.bounds(delta("scylla_task_run_seconds_sum", queue="m-q", status="completed"), 0)
    assert delta("scylla_task_run_seconds_bucket", queue="m-q", status="completed", le="+Inf") == 1


@pytest.mark.django_db(transaction=True)
def test_the_run_time_a_worker_measured_is_observed_without_a_query(client, worker):
    before = scrape(client)
    task = running_task(worker, queue="m-timed", rn="m-timed")
    with CaptureQueriesContext(connection) as queries:
        done = Task.objects.finish_many(
            worker, [Outcome(task.pk, task.leases, result=1, duration=2.5)]
        )
    assert done == {task.pk}
    history_reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith("SELECT") and "history" in q["sql"]
    ]
    assert not history_reads
    after = scrape(client)
    labels = {"queue": "m-timed", "status": "completed"}
    assert value(after, "scylla_task_run_seconds_sum", **labels) - value(
        before, "scylla_task_run_seconds_sum", **labels
    ) == pytest.approx(2.5)


@pytest.mark.django_db(transaction=True)
def test_the_resources_a_worker_measured_are_written_and_observed(client, worker):
    before = scrape(client)
    task = running_task(worker, queue="m-used", rn="m-used")
    outcome = Outcome(task.pk, task.leases, result=1, cpu_time=0.25, peak_memory=50 * 2**20)
    assert Task.objects.finish_many(worker, [outcome]) == {task.pk}
    task.refresh_from_db()
    assert (task.cpu_time, task.peak_memory) == (0.25, 50 * 2**20)
    after = scrape(client)
    labels = {"queue": "m-used", "status": "completed"}

    def delta(name: str, **extra: str) -> float:
        return value(after, name, **labels, **extra) - value(before, name, **labels, **extra)

    assert delta("scylla_task_cpu_seconds_sum") == pytest.approx(0.25)
    assert delta("scylla_task_cpu_seconds_bucket", le="0.5") == 1
    assert delta("scylla_task_cpu_seconds_bucket", le="0.1") == 0
    assert delta("scylla_task_peak_memory_bytes_sum") == 50 * 2**20
    assert delta("scylla_task_peak_memory_bytes_bucket", le=floatToGoString(64 * 2**20)) == 1
    assert delta("scylla_task_peak_memory_bytes_bucket", le=floatToGoString(32 * 2**20)) == 0


@pytest.mark.django_db(transaction=True)
def test_finish_many_sends_the_tasks_it_was_given_as_written_without_reading_them_back(worker):
    """Receivers of `task_finished` cost no query when the outcomes carry their tasks."""
    from scylla_django import signals

    def finish(receiver):
        done, failed = running_task(worker, queue="m-given"), running_task(worker, queue="m-given")
        outcomes = [
            Outcome(done.pk, done.leases, result={"x": 1}, duration=0.5, task=done),
            Outcome(failed.pk, failed.leases, errors=[{"code": "boom"}], duration=0.1, task=failed),
        ]
        if receiver is not None:
            signals.task_finished.connect(receiver)
        try:
            with CaptureQueriesContext(connection) as queries:
                Task.objects.finish_many(worker, outcomes)
        finally:
            if receiver is not None:
                signals.task_finished.disconnect(receiver)
        return (done, failed), len(queries.captured_queries)

    sent: list[tuple[object, str, float | None]] = []
    (done, failed), with_receiver = finish(
        lambda sender, task, status, duration=None, **kw: sent.append((task, status, duration))
    )
    _, without = finish(None)
    assert with_receiver == without
    assert sent == [(done, "completed", 0.5), (failed, "aborted", 0.1)]
    for given in (done, failed):
        stored = Task.objects.get(pk=given.pk)
        for field in ("status", "deadline", "updated", "progress", "result", "errors"):
            assert getattr(given, field) == getattr(stored, field), field


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_a_worker_process_s_counters_reach_the_view_in_multi_process_mode(
    client, tmp_path, monkeypatch
):
    for n in range(2):
        Task.objects.submit("t-echo", {"n": n}, rn=f"mp{n}")
    process = start(
        "scylla_worker",
        "--queue=t-echo",
        "--concurrency=2",
        "--once",
        "--handlers=tests.worker_handlers",
        env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
    )
    code, output = finish(process)
    assert code == 0, output
    assert list(tmp_path.glob("*.db")), "the worker wrote no metrics files"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = scrape(client)
    assert value(samples, "scylla_tasks_leased_total", queue="t-echo") == 2
    assert value(samples, "scylla_tasks_finished_total", queue="t-echo", status="completed") == 2
    assert value(samples, "scylla_task_run_seconds_count", queue="t-echo", status="completed") == 2
    assert value(samples, "scylla_tasks", queue="t-echo", status="completed") == 2


def test_the_view_refuses_other_methods(client):
    assert client.post("/metrics").status_code == 405


@pytest.mark.django_db
def test_dead_letters_and_open_batches_progress(client, worker):
    from scylla_django.batches import Batch

    gone = running_task(worker, queue="emails", rn="dead1")
    gone.abort(worker, [{"code": "x", "args": {}, "description": ""}])
    with Batch() as batch:
        for n in range(3):
            batch.submit("default", {"n": n})
    [leased] = Task.objects.lease(worker, ["default"])
    leased.complete(worker)
    assert batch.row is not None
    samples = scrape(client)
    assert value(samples, "scylla_dead_tasks", queue="emails") == 1
    assert value(samples, "scylla_batches_open") == 1
    pk = str(batch.row.pk)
    assert value(samples, "scylla_batch_tasks", batch=pk, state="total") == 3
    assert value(samples, "scylla_batch_tasks", batch=pk, state="completed") == 1
    assert value(samples, "scylla_batch_tasks", batch=pk, state="failed") == 0
    Task.objects.all().discard()
    assert value(scrape(client), "scylla_dead_tasks", queue="emails") == 0


def test_a_database_is_chosen_by_its_alias(client, worker):
    assert client.get("/metrics", {"database": "default"}).status_code == 200
    unknown = client.get("/metrics", {"database": "nowhere"})
    assert unknown.status_code == 404 and b"nowhere" in unknown.content
