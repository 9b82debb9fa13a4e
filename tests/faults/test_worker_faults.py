"""Worker faults with real processes: handlers that end by BaseException or ignore stops, races
between heartbeats and yields, tasks the monitor takes away, and a database outage."""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now

from scylla_django.enums import EventType, Status
from scylla_django.exceptions import LeaseLost
from scylla_django.models import History, Task, Worker
from tests.private_postgres import PrivateCluster, available
from tests.processes import finish, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

FAST = ["--poll-interval", "0.1", "-v", "2", "--handlers=tests.worker_handlers"]


def worker(
    *queues: str,
    lease: str = "5s",
    heartbeat: str = "0.3",
    extra: tuple = (),
    env: dict[str, str] | None = None,
):
    return start(
        "scylla_worker",
        *(f"--queue={q}" for q in queues),
        f"--lease-length={lease}",
        f"--heartbeat-interval={heartbeat}",
        *FAST,
        *extra,
        env=env,
    )


def deadlines(tasks: list[Task]) -> list[datetime]:
    found = dict(Task.objects.filter(pk__in=[t.pk for t in tasks]).values_list("pk", "deadline"))
    return [found[t.pk] for t in tasks]


def sessions_named(name: str) -> int:
    """The test database's sessions whose `application_name` is `name` (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name])
        return int(cursor.fetchone()[0])


def running(n: int) -> bool:
    return Task.objects.filter(status=Status.RUNNING).count() == n


def last_event(task: Task) -> str:
    return History.objects.filter(task=task).order_by("-id").values_list("typ", flat=True)[0]


def test_a_handler_raising_systemexit_or_keyboardinterrupt_aborts_its_task_only():
    exits = Task.objects.submit("t-exit", {}, rn="exits")
    interrupts = Task.objects.submit("t-interrupt", {}, rn="interrupts")
    code, output = finish(worker("t-exit", "t-interrupt", extra=("--max-tasks", "2")))
    assert code == 0, output
    for task, kind in ((exits, "builtins.SystemExit"), (interrupts, "builtins.KeyboardInterrupt")):
        task.refresh_from_db()
        assert task.status == Status.ABORTED, output
        [error] = task.errors
        assert (error["code"], error["args"]["type"]) == ("exception", kind)
        assert "worker_handlers.py" in error["args"]["traceback"]
    assert "exit from exits" in exits.errors[0]["description"]
    # The worker went on: it still takes tasks after both.
    echo = Task.objects.submit("t-echo", {"after": "exits"})
    code, output = finish(worker("t-echo", extra=("--once",)))
    assert code == 0 and Task.objects.get(pk=echo.pk).status == Status.COMPLETED, output


def test_the_grace_period_ends_the_process_even_if_handlers_ignore_stops(tmp_path):
    marks = [tmp_path / f"started{n}" for n in range(2)]
    tasks = [
        Task.objects.submit("t-stubborn", {"seconds": 600, "started": str(mark)}, rn=f"st{n}")
        for n, mark in enumerate(marks)
    ]
    process = worker("t-stubborn", extra=("--concurrency", "2", "--grace-period", "1"))
    # Both handlers must be running: one stopped before it starts is yielded at once.
    wait_until(lambda: all(mark.exists() for mark in marks), what="2 running handlers")
    process.send_signal(signal.SIGTERM)
    # Far less than the handlers' ten minutes: the grace period (1 s) ended the process.
    code, output = finish(process, timeout=120)
    assert code == 3, output  # handlers were abandoned
    assert "st0" in output and "abandoned" in output
    for task in tasks:
        assert last_event(task) == EventType.YIELD
    assert Task.objects.reset_expired() == 2  # yielded: ready again at the monitor's next pass


@pytest.mark.postgres
def test_a_heartbeat_in_flight_never_undoes_a_yield():
    """Fast heartbeats of many tasks, then SIGTERM: every yielded lease stays given back."""
    n = 8
    for round_ in range(3):
        tasks = [Task.objects.submit("t-sleep", {"seconds": 60}) for _ in range(n)]
        name = f"heartbeats-{round_}"  # the worker's sessions, in pg_stat_activity
        process = worker(
            "t-sleep",
            lease="3s",
            heartbeat="0.01",
            extra=("--concurrency", str(n)),
            env={"PGAPPNAME": name},
        )
        wait_until(lambda: running(n), what=f"{n} running tasks")
        first = deadlines(tasks)
        wait_until(
            lambda tasks=tasks, first=first: all(
                a > b for a, b in zip(deadlines(tasks), first, strict=True)
            ),
            what="every lease heartbeated",
        )
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, timeout=60)
        assert code == 0, output
        # A heartbeat in flight when the process ended runs to its end on the server.
        wait_until(lambda name=name: not sessions_named(name), what="the worker's sessions to end")
        for task in tasks:
            assert last_event(task) == EventType.YIELD, (round_, output)
        # Every deadline is in the past: the monitor resets all at once, no waiting a lease.
        assert Task.objects.filter(pk__in=[t.pk for t in tasks], deadline__lt=Now()).count() == n
        assert Task.objects.reset_expired() == n
        Task.objects.all().delete()


def test_the_database_refuses_a_heartbeat_after_a_yield(worker_model):
    task = Task.objects.submit("t-sleep", {})
    [task] = Task.objects.lease(worker_model, ["t-sleep"], lease_length=60)
    task.yield_lease(worker_model)
    deadline = Task.objects.get(pk=task.pk).deadline
    with pytest.raises(LeaseLost):
        task.heartbeat(worker_model, progress=0.5, lease_length=60)
    assert Task.objects.heartbeat_many(worker_model, {task.pk: (1, 0.5)}, lease_length=60) == set()
    refusal = Task.objects.refusals(worker_model, {task.pk: 1})[task.pk]
    assert isinstance(refusal, LeaseLost) and "gave the lease" in str(refusal)
    assert Task.objects.get(pk=task.pk).deadline == deadline
    assert Task.objects.reset_expired() == 1


@pytest.fixture
def worker_model(db) -> Worker:
    return Worker.objects.register(["t-sleep"], 4)


def test_a_task_the_monitor_aborted_stops_in_its_old_worker(settings):
    """SIGSTOP past the lease with MAX_LEASES: the monitor aborts; the old owner must stop.
    (Once the handler's start is known: a lease whose handler was not known to have started
    would not count, docs/howto/crashes.md.)"""
    settings.SCYLLA = {"MAX_LEASES": 1}
    task = Task.objects.submit("t-sleep", {"seconds": 600})
    process = worker("t-sleep", lease="1s", extra=("--max-tasks", "1"))
    try:
        wait_until(
            lambda: Task.objects.filter(status=Status.RUNNING, handler_started=True).exists(),
            what="the handler's start reported",
        )
        owner = Task.objects.get(pk=task.pk).owner
        process.send_signal(signal.SIGSTOP)
        wait_until(lambda: Task.objects.reset_expired() == 1, timeout=60, what="the expiry")
        assert Task.objects.get(pk=task.pk).status == Status.ABORTED
        process.send_signal(signal.SIGCONT)
        # Far less than the handler's ten minutes: the old owner stopped it.
        code, output = finish(process, timeout=120)
    finally:
        process.send_signal(signal.SIGCONT)
    assert code == 0, output
    # Resumed past its lease, it gives the task up at once (its watchdog sees that no
    # heartbeat was answered in time), or learns from its next heartbeat that it was taken.
    assert f"{owner} does not hold lease" in output or "giving the task up" in output, output
    task.refresh_from_db()
    assert task.errors[0]["code"] == "max_leases_exceeded"
    assert task.result is None
    # Through the Python API, the old owner learns that the lease is lost.
    for late_write in (
        lambda: task.heartbeat(owner),
        lambda: task.complete(owner, "late"),
        lambda: task.abort(owner, [{"code": "late"}]),
    ):
        with pytest.raises(LeaseLost):
            late_write()


@pytest.fixture
def private_cluster():
    reason = available()
    if reason:
        pytest.skip(reason)
    cluster = PrivateCluster()
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.destroy()


def start_on(cluster: PrivateCluster, *args: str) -> subprocess.Popen:
    return start(*args, env={"DATABASE_URL": cluster.url})


OUTAGE = 17.0  # longer than the leases below and than the 15 s an outcome used to be retried


# Its workers run on a private PostgreSQL whatever DATABASE_URL says: PostgreSQL cells only.
@pytest.mark.slow
@pytest.mark.postgres
def test_a_database_outage_longer_than_the_lease(private_cluster):
    """The worker keeps its outcome through the outage and writes it, and the monitor resets
    a lease that expired meanwhile, each within 2 s of the database coming back."""
    cluster = private_cluster
    submit = start_on(
        cluster,
        "shell",
        "-c",
        "from scylla_django.models import Task; "
        "Task.objects.submit('t-stubborn', {'seconds': 1}, rn='kept'); "
        "Task.objects.submit('t-sleep', {'seconds': 60}, rn='expires')",
    )
    assert finish(submit)[0] == 0
    common = ("--poll-interval", "0.2", "-v", "2", "--handlers=tests.worker_handlers")
    keeper = start_on(cluster, "scylla_worker", "--queue=t-stubborn", "--lease-length=60s", *common)
    victim = start_on(cluster, "scylla_worker", "--queue=t-sleep", "--lease-length=3s", *common)
    monitor = start_on(cluster, "scylla_monitor", "--interval", "0.5", "-v", "2")
    processes = [keeper, victim, monitor]
    try:

        def status(rn: str) -> str | None:
            rows = cluster.query("SELECT status FROM scylla_django_task WHERE rn = %s", rn)
            return rows[0][0] if rows else None

        wait_until(
            lambda: status("kept") == status("expires") == "running", timeout=120, what="leases"
        )
        cluster.stop()
        victim.kill()  # its lease expires during the outage
        time.sleep(OUTAGE)
        cluster.start()
        back = datetime.now(UTC)
        wait_until(lambda: status("kept") == "completed", timeout=60, what="the kept outcome")
        wait_until(lambda: status("expires") == "ready", timeout=60, what="the reset")
        [(leases, completed)] = cluster.query(
            "SELECT leases, updated FROM scylla_django_task WHERE rn = 'kept'"
        )
        events = cluster.query(
            "SELECT h.typ, h.time FROM scylla_django_history h JOIN scylla_django_task t "
            "ON t.id = h.task_id WHERE t.rn = 'expires' ORDER BY h.id"
        )
        assert [typ for typ, _ in events] == ["TaskAssignment", "TaskTimeout"], events
        reset = events[-1][1]
        assert leases == 1  # written by its first lease, not run again
        # Both written once the database was back, by the worker and the monitor that lived
        # through the outage (the keeper's handler sleeps past it; see OUTAGE).
        assert completed >= back - timedelta(seconds=1), (completed, back)
        assert reset >= back - timedelta(seconds=1), (reset, back)
        for process in (keeper, monitor):
            assert process.poll() is None, "a process died in the outage"
            process.send_signal(signal.SIGTERM)
        keeper_code, keeper_output = finish(keeper)
        monitor_code, monitor_output = finish(monitor)
        assert keeper_code == 0, keeper_output
        assert monitor_code == 0, monitor_output
        assert "could not write 1 outcome" in keeper_output
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
