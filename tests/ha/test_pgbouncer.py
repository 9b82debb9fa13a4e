"""The core and the runtime through PgBouncer in transaction mode: real workers, a monitor and a
client in their own processes, every statement through a pool of three server connections,
only the workers' LISTEN direct (SCYLLA["LISTEN_DATABASE"]).

Debian's PgBouncer (1.18) keeps no prepared statement across transactions: the pooled settings
(`DISABLE_SERVER_SIDE_CURSORS = True`) turn them off, and the client says so.
"""

from __future__ import annotations

import json
import signal

import pytest
from django.db import connection

from scylla_django.enums import Status
from scylla_django.models import History, Task, Worker
from scylla_django.validation import worker_id
from tests.ha.pgbouncer import PgBouncer, available
from tests.processes import finish, output_so_far, start, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.slow,
]


@pytest.fixture
def bouncer():
    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer pools PostgreSQL")
    reason = available()
    if reason:
        pytest.skip(reason)
    settings = connection.settings_dict
    host, port = settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432)
    pooler = PgBouncer(host=host, server_port=port)
    try:
        pooler.start()
        yield pooler
    finally:
        pooler.stop()


def pooled_env(pooler: PgBouncer, *, listen_direct: bool = True) -> dict[str, str]:
    settings = connection.settings_dict
    env = {"DATABASE_URL": pooler.url(settings["NAME"]), "SCYLLA_TEST_POOLED": "1"}
    if listen_direct:
        host, port = settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
        env["SCYLLA_TEST_LISTEN_URL"] = f"postgres://postgres@{host}:{port}/{settings['NAME']}"
    return env


def worker(env: dict[str, str]):
    return start(
        "scylla_worker",
        "--queue=t-echo",
        "--queue=t-sleep",
        "--queue=t-record",
        "--concurrency=4",
        "--lease-length=3s",
        "--heartbeat-interval=0.3",
        # Longer than the test: a task is taken at once only if a notification woke the worker.
        "--poll-interval=60",
        "--handlers=tests.worker_handlers",
        "-v",
        "2",
        env=env,
    )


def test_workers_monitor_and_client_through_transaction_pooling(bouncer, tmp_path):
    env = pooled_env(bouncer)
    monitor = start("scylla_monitor", "--interval=0.5", "-v", "2", env=env)
    workers = [worker(env), worker(env)]
    processes = [monitor, *workers]
    try:
        wait_until(lambda: listening_sessions() >= 2, timeout=60, what="both workers listening")
        client = start("shell", "-c", "from tests.ha.pooled_client import main; main()", env=env)
        code, output = finish(client, timeout=60)
        assert code == 0, output
        [line] = [line for line in output.splitlines() if line.startswith("RESULT ")]
        result = json.loads(line.removeprefix("RESULT "))
        assert result == {
            "inserted": 200,
            "duplicates": 10,
            "progressed": 3,
            "cancelled": 3,
            "prepares": False,
        }
        wait_until(
            lambda: not Task.objects.filter(status__in=[Status.READY, Status.RUNNING]).exists(),
            timeout=20,
            what="every task finished",
        )
        assert Task.objects.filter(status=Status.COMPLETED).count() == 200 + 10 + 10 + 2
        assert Task.objects.filter(status=Status.CANCELLED).count() == 3
        ordered = list(Task.objects.filter(rn__startswith="ordered-").order_by("updated", "pk"))
        assert [t.rn for t in ordered] == [f"ordered-{n}" for n in range(10)]
        assert Task.objects.get(rn="child").updated >= Task.objects.get(rn="parent").updated

        # A worker killed in the middle of its tasks: the monitor (through the pooler) gives
        # them back when their leases expire, and the other worker finishes them.
        path = tmp_path / "runs"
        Task.objects.submit_many(
            {"queue": "t-record", "spec": {"path": str(path), "sleep": 1.0}, "rn": f"rec-{n}"}
            for n in range(8)
        )
        wait_until(
            lambda: Task.objects.filter(rn__startswith="rec-", status=Status.RUNNING).exists(),
            timeout=10,
            what="records running",
        )
        owner = Task.objects.filter(rn__startswith="rec-", status=Status.RUNNING)[0].owner
        [victim] = [w for w in workers if w.pid == Worker.objects.get(pk=worker_id(owner)).pid]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        wait_until(
            lambda: (
                Task.objects.filter(rn__startswith="rec-", status=Status.COMPLETED).count() == 8
            ),
            timeout=30,
            what="every record completed",
        )
        reset = Task.objects.filter(rn__startswith="rec-", leases__gt=1).count()
        assert reset >= 1
        assert History.objects.filter(task__rn__startswith="rec-").exists()
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        outputs = [finish(process, timeout=30) for process in processes]
    code, output = outputs[0]
    assert code == 0, output
    assert "Traceback" not in output, output
    survivor = next(o for p, o in zip(workers, outputs[1:], strict=True) if p is not victim)
    code, output = survivor
    assert code == 0, output
    assert "Traceback" not in output, output


def listening_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN%%' AND application_name LIKE 'scylla_django %%'"
        )
        return int(cursor.fetchone()[0])


def test_a_pooled_database_without_a_direct_listen_database_is_warned_of(bouncer):
    """`manage.py check` with the pooled settings: W004 without LISTEN_DATABASE, none with."""
    code, output = finish(start("check", env=pooled_env(bouncer, listen_direct=False)))
    assert "scylla_django.W004" in output, output
    code, output = finish(start("check", env=pooled_env(bouncer)))
    assert code == 0, output
    assert "W004" not in output, output


def test_a_task_is_taken_at_once_through_the_direct_listen(bouncer):
    """With --poll-interval 60, only a notification on the direct LISTEN starts a task soon."""
    env = pooled_env(bouncer)
    process = worker(env)
    try:
        wait_until(lambda: listening_sessions() >= 1, timeout=60, what="the worker listening")
        # Past its first lease, waiting (-v 2 says so): only a notification wakes it now.
        wait_until(lambda: "waits for a task" in output_so_far(process), what="the worker waiting")
        task = Task.objects.submit("t-echo", {"now": True})
        wait_until(
            lambda: Task.objects.get(pk=task.pk).status == Status.COMPLETED,
            timeout=5,
            what="the task taken on its notification",
        )
    finally:
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, timeout=30)
    assert code == 0, output
