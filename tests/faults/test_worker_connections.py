"""How many connections a worker holds: one for its own statements (lease, outcomes,
heartbeats) and the listener's, whatever its concurrency; and an oversubscribed server
(six workers and two monitors, `max_connections = 20`) serves every one of them."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest
from django.db import connection

from scylla_django.enums import Status
from scylla_django.models import Task
from scylla_django.worker import TaskWorker, WorkerOptions
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.private_postgres import PrivateCluster, available
from tests.processes import finish, output_so_far, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def backends() -> int:
    """The other sessions on the test database now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def test_a_worker_holds_two_connections_at_concurrency_8():
    """Its own statements share one connection; the listener has the other. (The handlers'
    own queries, none here, get Django's per-thread connections, closed after each task.)"""
    Task.objects.submit_many({"queue": "t-sleep", "spec": {"seconds": 0.2}} for _ in range(40))
    worker = TaskWorker(WorkerOptions(["t-sleep"], concurrency=8, heartbeat_interval=0.1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    most = 0
    try:
        wait_until(lambda: worker.listener is not None and worker.in_flight_count() > 0)
        while Task.objects.exclude(status=Status.COMPLETED).exists():
            most = max(most, backends())
            time.sleep(0.01)
    finally:
        worker.stop()
        thread.join(20)
    assert not thread.is_alive()
    assert most == 2
    wait_until(lambda: backends() == 0, timeout=5, what="the worker's connections closed")


@pytest.fixture
def small_cluster():
    reason = available()
    if reason:
        pytest.skip(reason)
    cluster = PrivateCluster(settings=("max_connections=20",))
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.destroy()


@pytest.mark.slow
def test_six_workers_and_two_monitors_share_twenty_connections(small_cluster):
    """Every task completes, and no process is refused a connection."""
    cluster = small_cluster
    env = {"DATABASE_URL": cluster.url}
    submit = start(
        "shell",
        "-c",
        "from scylla_django.models import Task; Task.objects.submit_many("
        "{'queue': 't-sleep', 'spec': {'seconds': 0.05}} for _ in range(600))",
        env=env,
    )
    assert finish(submit, timeout=60)[0] == 0
    common = ("--poll-interval", "0.2", "--handlers=tests.worker_handlers")
    processes: list[subprocess.Popen] = [
        start("scylla_worker", "--queue=t-sleep", "--concurrency=2", *common, env=env)
        for _ in range(6)
    ]
    processes += [start("scylla_monitor", "--interval", "0.5", env=env) for _ in range(2)]
    try:

        def completed() -> int:
            [(n,)] = cluster.query(
                "SELECT count(*) FROM scylla_django_task WHERE status = 'completed'"
            )
            return int(n)

        wait_until(lambda: completed() == 600, timeout=120, what="600 completed tasks")
        for process in processes:
            assert process.poll() is None, output_so_far(process)
            process.send_signal(signal.SIGTERM)
        for process in processes:
            code, output = finish(process, timeout=40)
            assert code == 0, output
            assert "too many clients" not in output, output
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
