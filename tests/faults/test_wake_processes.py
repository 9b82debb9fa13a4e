"""Thousands of tasks waiting on events, woken by concurrent emitter processes beside three
monitor processes: parked, they hold no worker slot and no connection; every wait is ended
once and every task made due once, as the database itself records (triggers that log each
write); a wait's timeout ends it within a monitor interval of its time.

PostgreSQL holds 10,000 waiting tasks here; SQLite 1,000 (one writer at a time: the emitters'
transactions queue behind each other, and 10,000 wakes would take minutes on a shared host).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection

from scylla_django.enums import Status
from scylla_django.models import PARKED, Task, Wait, WaitKind
from scylla_django.models.waits import match_key, nested_match
from tests.processes import finish, start, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.concurrency,
    # The counting triggers are written for PostgreSQL and SQLite.
    pytest.mark.skipif(connection.vendor == "mysql", reason="PostgreSQL and SQLite triggers"),
]

POSTGRES = connection.vendor == "postgresql"
#: Tasks parked by hand (as a worker parks them), beside those a worker process parks.
WAITING = 10_000 if POSTGRES else 1_000
#: Groups of waiting tasks: an event of a group wakes every task of it.
GROUPS = 100 if POSTGRES else 20
EMITTERS = 4
MONITORS = 3
#: Tasks a worker process parks (a real run to the wait), and waits that time out.
PARKED_BY_WORKER = 40
TIMING_OUT = 5
#: The monitors' interval (their default): a timeout ends within it.
MONITOR_INTERVAL = 5.0
CONCURRENCY = 2
HANDLERS = "--handlers=tests.durable_handlers"


def monitor():
    return start("scylla_monitor", f"--interval={MONITOR_INTERVAL}", HANDLERS)


def worker():
    return start(
        "scylla_worker",
        "--queue=d-group",
        f"--concurrency={CONCURRENCY}",
        "--poll-interval=0.2",
        HANDLERS,
    )


def emitter(number: int):
    """A process that emits `wake.group` once for every group, in an order of its own."""
    code = (
        "import random\n"
        "from scylla_django import emit\n"
        f"groups = list(range({GROUPS}))\n"
        f"random.Random({number}).shuffle(groups)\n"
        "for group in groups:\n"
        f"    emit('wake.group', {{'group': group, 'by': {number}}})\n"
        "print('emitted', len(groups))\n"
    )
    return start("shell", "-c", code)


def seed_waiting(count: int) -> list[int]:
    """`count` tasks parked in the wait `d-group`'s handler begins, written as a worker's
    park writes them (ready, `not_before` PARKED, an open wait); in a queue no worker serves
    here, so that only a wake changes them. Their pks."""
    items = [
        {"queue": "d-group-parked", "spec": {"group": n % GROUPS}, "rn": f"seeded-{n}"}
        for n in range(count)
    ]
    Task.objects.submit_many(items)
    tasks = Task.objects.filter(queue="d-group-parked")
    tasks.update(leases=1, snoozes=1, not_before=PARKED)
    rows = list(tasks.values_list("pk", "spec"))
    Wait.objects.bulk_create(
        (
            Wait(
                task_id=pk,
                name="event:wake.group",
                kind=WaitKind.EVENT,
                event_kind="wake.group",
                match=nested_match({"group": spec["group"]}),
                match_key=match_key({"group": spec["group"]}),
                lease=1,
            )
            for pk, spec in rows
        ),
        batch_size=2000,
    )
    return [pk for pk, _ in rows]


#: A log of every write to a wait and of every change of a task's `not_before`, kept by the
#: database itself: what a wake writes, counted where no client can miscount it.
LOG_TABLE = "test_wake_log"


def install_write_log() -> None:
    with connection.cursor() as cursor:
        if POSTGRES:
            cursor.execute(
                f"CREATE TABLE {LOG_TABLE} (id bigserial PRIMARY KEY, what text, row_id bigint)"
            )
            cursor.execute(
                f"CREATE FUNCTION {LOG_TABLE}() RETURNS trigger AS $$ BEGIN "
                f"INSERT INTO {LOG_TABLE} (what, row_id) VALUES (TG_ARGV[0], NEW.id); "
                "RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                f"CREATE TRIGGER {LOG_TABLE}_wait AFTER UPDATE ON scylla_django_wait "
                f"FOR EACH ROW EXECUTE FUNCTION {LOG_TABLE}('wait')"
            )
            cursor.execute(
                f"CREATE TRIGGER {LOG_TABLE}_task AFTER UPDATE OF not_before "
                "ON scylla_django_task FOR EACH ROW "
                "WHEN (OLD.not_before IS DISTINCT FROM NEW.not_before) "
                f"EXECUTE FUNCTION {LOG_TABLE}('task')"
            )
        else:
            cursor.execute(
                f"CREATE TABLE {LOG_TABLE} "
                "(id integer PRIMARY KEY AUTOINCREMENT, what text, row_id integer)"
            )
            cursor.execute(
                f"CREATE TRIGGER {LOG_TABLE}_wait AFTER UPDATE ON scylla_django_wait "
                f"FOR EACH ROW BEGIN INSERT INTO {LOG_TABLE} (what, row_id) "
                "VALUES ('wait', NEW.id); END"
            )
            cursor.execute(
                f"CREATE TRIGGER {LOG_TABLE}_task AFTER UPDATE OF not_before "
                "ON scylla_django_task FOR EACH ROW "
                "WHEN OLD.not_before IS NOT NEW.not_before "
                f"BEGIN INSERT INTO {LOG_TABLE} (what, row_id) VALUES ('task', NEW.id); END"
            )


def remove_write_log() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS {LOG_TABLE}_wait" + suffix("wait"))
        cursor.execute(f"DROP TRIGGER IF EXISTS {LOG_TABLE}_task" + suffix("task"))
        cursor.execute(f"DROP TABLE IF EXISTS {LOG_TABLE}")
        if POSTGRES:
            cursor.execute(f"DROP FUNCTION IF EXISTS {LOG_TABLE}()")


def suffix(table: str) -> str:
    return f" ON scylla_django_{table}" if POSTGRES else ""


def logged(what: str) -> Counter[int]:
    """How many times each row was written, by the log (`what`: wait or task)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT row_id FROM {LOG_TABLE} WHERE what = %s", [what])
        return Counter(row for (row,) in cursor.fetchall())


def connections_to_the_database() -> int:
    """The sessions open on this test database, this one apart (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def resumed(rns: list[str]) -> Counter[str]:
    """How many times each task recorded that it ran past its wait (the app's table)."""
    return Counter(
        User.objects.filter(first_name="resumed", last_name__in=rns).values_list(
            "last_name", flat=True
        )
    )


@pytest.mark.slow  # tens of seconds: ten thousand wakes by four processes on PostgreSQL
def test_waiting_tasks_hold_nothing_and_concurrent_emitters_wake_each_once():
    seeded = seed_waiting(WAITING)
    monitors = [monitor() for _ in range(MONITORS)]
    processes = list(monitors)
    try:
        # A worker of two slots parks forty tasks and runs five whose waits time out.
        running = worker()
        processes.append(running)
        waiting = [
            Task.objects.submit("d-group", {"group": n % GROUPS}, rn=f"parked-{n}").rn
            for n in range(PARKED_BY_WORKER)
        ]
        timing_out = [
            Task.objects.submit("d-group", {"group": "never", "timeout": 2}, rn=f"late-{n}").rn
            for n in range(TIMING_OUT)
        ]
        wait_until(
            lambda: (
                Task.objects.filter(rn__in=timing_out, status=Status.COMPLETED).count()
                == TIMING_OUT
                and Task.objects.filter(rn__in=waiting, status=Status.READY, owner=None).count()
                == PARKED_BY_WORKER
                and Wait.objects.filter(task__rn__in=waiting).count() == PARKED_BY_WORKER
            ),
            timeout=180,
            what="forty tasks parked by the worker and five timed out",
        )
        # Parked, they hold no slot of its two (forty are parked) and no connection.
        if POSTGRES:
            sessions = connections_to_the_database()
            assert sessions <= 5 + MONITORS, sessions  # the worker's few and each monitor's
        for rn in timing_out:
            task = Task.objects.get(rn=rn)
            assert task.result == {"by": None, "timed_out": True}
            wait = Wait.objects.get(task=task)
            assert wait.outcome == "timed_out"
            late = wait.ended - wait.timeout
            assert timedelta(0) <= late <= timedelta(seconds=MONITOR_INTERVAL), late
        code, output = finish(signal_to_stop(running))
        assert code == 0, output
        processes.remove(running)

        # Concurrent emitters wake every wait once, whichever of them gets there first.
        install_write_log()
        try:
            emitters = [emitter(n) for n in range(EMITTERS)]
            processes.extend(emitters)
            for process in emitters:
                code, output = finish(process, timeout=600)
                assert code == 0 and f"emitted {GROUPS}" in output, output
                processes.remove(process)
            waits = {w.pk: w for w in Wait.objects.filter(kind=WaitKind.EVENT)}
            woken = [w for w in waits.values() if w.match != {"group": "never"}]
            assert len(woken) == WAITING + PARKED_BY_WORKER
            assert all(w.outcome == "woken" for w in woken)
            assert all(w.payload["group"] == w.match["group"] for w in woken)
            # The database's own log: each wait written once, each task made due once.
            assert logged("wait") == {w.pk: 1 for w in woken}
            tasks = [*seeded, *Task.objects.filter(rn__in=waiting).values_list("pk", flat=True)]
            assert logged("task") == {pk: 1 for pk in tasks}
        finally:
            remove_write_log()
        assert not Task.objects.filter(pk__in=seeded, not_before=PARKED).exists()

        # Woken, the worker's tasks run past their waits once each.
        running = worker()
        processes.append(running)
        wait_until(
            lambda: (
                Task.objects.filter(rn__in=waiting, status=Status.COMPLETED).count()
                == PARKED_BY_WORKER
            ),
            timeout=180,
            what="the woken tasks completed",
        )
        assert resumed(waiting) == {rn: 1 for rn in waiting}
        for task in Task.objects.filter(rn__in=waiting):
            assert task.result["by"] in range(EMITTERS) and not task.result["timed_out"]
    finally:
        for process in processes:
            signal_to_stop(process)
        for process in processes:
            finish(process)


def signal_to_stop(process):
    """SIGTERM `process` (by its pid); return it for `finish()`."""
    process.terminate()
    return process
