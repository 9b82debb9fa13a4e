"""Run-time limits and lease keeping with real worker processes: a handler that loops for ever
is aborted with `timeout` and the worker goes on; a worker whose database connection starves
for longer than a lease gives its task up before the lease is reset, so no handler works on
past its reset."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from contextlib import suppress
from datetime import timedelta

import pytest
from django.db import connection

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from tests.processes import database_url, finish, start, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

FAST = ["--poll-interval", "0.1", "-v", "2", "--handlers=tests.worker_handlers"]


def worker(
    *queues: str, lease: str = "5s", env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
):
    return start(
        "scylla_worker",
        *(f"--queue={q}" for q in queues),
        f"--lease-length={lease}",
        *FAST,
        *extra,
        env=env,
    )


def test_an_endless_handler_is_aborted_with_timeout_and_the_worker_keeps_serving():
    grace = 1.0
    spin = Task.objects.submit("t-spin", {}, timeout=1)
    process = worker(
        "t-spin", "t-echo", env={"SCYLLA_TEST_SETTINGS": json.dumps({"TIMEOUT_GRACE": grace})}
    )
    try:
        wait_until(lambda: Task.objects.get(pk=spin.pk).status == Status.RUNNING, what="lease")
        leased = Task.objects.get(pk=spin.pk).updated
        wait_until(lambda: Task.objects.get(pk=spin.pk).status == Status.ABORTED, timeout=60)
        spin.refresh_from_db()
        assert spin.errors[0]["code"] == "timeout"
        # Not before its limit (on the database's clock); an endless handler ends only so.
        assert (spin.updated - leased).total_seconds() >= 1.0
        after = Task.objects.submit("t-echo", {"after": "spin"})
        wait_until(lambda: Task.objects.get(pk=after.pk).status == Status.COMPLETED, timeout=60)
    finally:
        process.send_signal(signal.SIGTERM)
        code, output = finish(process)
    assert code == 0, output
    assert "ran past its 1s timeout" in output
    assert "aborting the task (timeout)" in output


# PostgreSQL only: on SQLite a process frozen by SIGSTOP while it holds the file's write lock
# (any of its writes, a heartbeat's included) keeps the monitor out until it is thawed.
@pytest.mark.postgres
def test_a_stopped_worker_cannot_hold_a_task_past_its_limit_the_monitor_aborts_it():
    """The database backs the limit: a worker frozen (SIGSTOP) after a heartbeat, its lease
    capped at the limit, leaves the task to the monitor, which aborts it with `timeout` rather
    than letting it run again."""
    task = Task.objects.submit("t-spin", {}, timeout=1)
    # No prefetch: with its one slot busy the worker writes nothing but its heartbeats, so the
    # SIGSTOP below cannot freeze it inside a lease's write (on SQLite, a lock of the whole
    # file that would keep the monitor out).
    process = worker(
        "t-spin",
        lease="8s",
        env={"SCYLLA_TEST_SETTINGS": json.dumps({"TIMEOUT_GRACE": 6})},
        extra=("--prefetch", "0"),
    )
    monitor = None
    try:
        # The lease ends at its start + 1 s + 6 s, and so does the first heartbeat (a quarter
        # of the lease in); the watchdog would abort the task itself at that limit: freeze the
        # worker before.
        wait_until(
            lambda: (
                History.objects.filter(task=task, typ=EventType.ASSIGNMENT).exists()
                and Task.objects.get(pk=task.pk).updated
                > History.objects.get(task=task, typ=EventType.ASSIGNMENT).time
                # the heartbeat that reported the handler's start: a full lease from then
                # (before it, a reservation), capped at the limit
                and Task.objects.get(pk=task.pk).handler_started
            ),
            timeout=30,  # the worker's start, its lease and a heartbeat, on a loaded machine
            what="the heartbeat that reports the start",
        )
        process.send_signal(signal.SIGSTOP)
        task.refresh_from_db()
        assert task.status == Status.RUNNING and task.deadline == task.timeout_at
        monitor = start("scylla_monitor", "--interval=0.2", "-v", "2")
        wait_until(
            lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED,
            timeout=20,
            what="the monitor's abort",
        )
    finally:
        process.kill()
        process.send_signal(signal.SIGCONT)
        finish(process)
        if monitor is not None:
            monitor.send_signal(signal.SIGTERM)
            finish(monitor)
    task.refresh_from_db()
    assert task.errors[0]["code"] == "timeout"
    assert task.leases == 1  # never leased again
    assert list(History.objects.filter(task=task).values_list("typ", flat=True)) == [
        EventType.ASSIGNMENT,
        EventType.TIMEOUT,
        EventType.ABORT,
    ]


@pytest.mark.slow
def test_a_worker_frozen_before_its_first_heartbeat_cannot_hold_a_task_past_its_limit(tmp_path):
    """The lease itself ends at its start plus the run-time limit and TIMEOUT_GRACE, however
    long the lease asked for: a worker frozen (SIGSTOP) as its handler starts, before its
    first heartbeat, holds the task no longer than that; the monitor aborts it with `timeout`,
    and the worker that would take a lease made ready again never runs it a second time."""
    starts = tmp_path / "starts.log"  # t-record writes a line as its handler starts
    timeout, grace, lease = 1, 3, 20  # the first heartbeat would come a quarter of the lease in
    task = Task.objects.submit("t-record", {"path": str(starts), "sleep": 60}, timeout=timeout)
    env = {"SCYLLA_TEST_SETTINGS": json.dumps({"TIMEOUT_GRACE": grace})}
    # One slot, no prefetch: with the handler running the worker writes nothing but its
    # heartbeats, so the SIGSTOP cannot freeze it inside a write (on SQLite, a lock of the
    # whole file that would keep the monitor out).
    frozen = worker("t-record", lease=f"{lease}s", env=env, extra=("--prefetch", "0"))
    others = []
    try:
        wait_until(starts.exists, what="the handler's start")
        frozen.send_signal(signal.SIGSTOP)
        held = Task.objects.get(pk=task.pk)
        # A worker that would run the task again if its lease were reset, and the monitor.
        others.append(worker("t-record", lease=f"{lease}s", env=env))
        others.append(start("scylla_monitor", "--interval=0.2", "-v", "2"))
        wait_until(
            lambda: Task.objects.get(pk=task.pk).status == Status.ABORTED,
            timeout=60,
            what="the task's abort",
        )
    finally:
        frozen.kill()
        frozen.send_signal(signal.SIGCONT)
        finish(frozen)
        for process in others:
            process.send_signal(signal.SIGTERM)
            finish(process)
    assert len(starts.read_text().splitlines()) == 1  # the handler started once
    # The lease it was given ended at the limit, before any heartbeat could cap it.
    assert held.status == Status.RUNNING and held.leases == 1
    leased_at = History.objects.get(task=task, typ=EventType.ASSIGNMENT).time
    limit = leased_at + timedelta(seconds=timeout + grace)
    assert held.timeout_at == limit and held.deadline == limit
    task.refresh_from_db()
    assert task.errors[0]["code"] == "timeout"
    assert task.leases == 1
    history = list(History.objects.filter(task=task).order_by("id").values_list("typ", "time"))
    assert [typ for typ, _ in history] == [
        EventType.ASSIGNMENT,
        EventType.TIMEOUT,
        EventType.ABORT,
    ]
    [_, reset_at, aborted_at] = [time_ for _, time_ in history]
    # Aborted by the monitor once the lease ran into the limit, never before it (the lease's
    # deadline was the limit, not the length it asked for: asserted above), in the same write
    # as the reset: the other worker never had it.
    assert limit <= reset_at == aborted_at == task.updated


class StallingProxy:
    """A TCP proxy to the database that can stall: while `stalled`, nothing passes either way
    (as a saturated network, or a pooler out of connections, would behave)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self._sockets: list[socket.socket] = [self.server]
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                self.flowing.wait()
                dst.sendall(data)
        with suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Stop: every connection closed, the accepting thread ended (a shutdown wakes the
        `accept()` it waits in; a close alone would not)."""
        self.flowing.set()
        for sock in self._sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with suppress(OSError):
                sock.close()
        self._acceptor.join(10)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a network connection to starve")
def test_no_handler_works_on_past_its_reset_after_the_connection_starves(tmp_path):
    settings = connection.settings_dict
    proxy = StallingProxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    url = database_url().replace(f":{settings['PORT'] or 5432}/", f":{proxy.port}/", 1)
    path = tmp_path / "steps.log"
    tasks = [
        Task.objects.submit("t-steps", {"path": str(path), "seconds": 60}, rn=f"s{n}")
        for n in range(3)
    ]
    process = start(
        "scylla_worker",
        "--queue=t-steps",
        "--lease-length=3s",
        "--concurrency=3",
        *FAST,
        env={"DATABASE_URL": url},
    )
    try:
        wait_until(
            lambda: Task.objects.filter(status=Status.RUNNING).count() == 3, what="3 running"
        )
        wait_until(
            lambda: (
                path.exists()
                and {line.split()[0] for line in path.read_text().splitlines()}
                == {t.rn for t in tasks}
            ),
            what="every handler at work",
        )
        proxy.flowing.clear()  # starve the worker until its leases expire
        stalled = time.time()
        reset = [0]

        def all_reset() -> bool:  # the monitor, on a connection of its own
            reset[0] += Task.objects.reset_expired()
            return reset[0] >= 3

        wait_until(all_reset, what="the three expired leases reset")
        assert reset == [3]
        proxy.flowing.set()
        wait_until(lambda: Task.objects.filter(leases=2).count() == 3, timeout=20, what="leases")
    finally:
        Task.objects.filter(pk__in=[t.pk for t in tasks]).cancel()
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, timeout=30)
        proxy.close()
    resets = {
        rn: time_.timestamp()
        for rn, time_ in History.objects.filter(typ=EventType.TIMEOUT).values_list(
            "task__rn", "time"
        )
    }
    second = {
        rn: time_.timestamp()
        for rn, time_ in History.objects.filter(typ=EventType.ASSIGNMENT)
        .order_by("id")
        .values_list("task__rn", "time")
    }  # the later assignment of each task wins: its second lease
    steps: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        rn, _, at = line.split()
        steps.setdefault(rn, []).append(float(at))
    for task in tasks:
        rn = task.rn
        assert stalled < resets[rn] < second[rn], output
        during = [at for at in steps[rn] if resets[rn] <= at < second[rn]]
        assert not during, f"{rn} worked on after its reset at {resets[rn]}: {during}"
        last_before = max(at for at in steps[rn] if at < resets[rn])
        assert last_before > stalled  # it did work on while its lease was surely held
    # Given up by the watchdog, or by the handler's own `ctx.check()` if it looked first.
    assert "giving it up (nothing is written for it)" in output or "giving the task up" in output
    assert code == 0, output
