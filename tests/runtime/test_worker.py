"""The worker runtime driven in-process (TaskWorker in threads), and the command's arguments."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError
from django.db.models import F

from scylla_django.enums import EventType, Status
from scylla_django.exceptions import Abort, LeaseLost, TaskCancelled
from scylla_django.handlers import HandlerAlreadyRegistered, HandlerRegistry, TaskContext, handler
from scylla_django.models import History, Task, TaskQuerySet, Worker
from scylla_django.testing import run_task
from scylla_django.worker import TaskWorker, WorkerOptions
from scylla_django.worker.slots import Slots
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.helpers import start_worker
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_returned_value_completes_the_task():
    task = Task.objects.submit("t-echo", {"x": [1, 2]})
    TaskWorker(WorkerOptions(["t-echo"], poll_interval=0.05)).run(once=True)
    task.refresh_from_db()
    assert (task.status, task.progress) == (Status.COMPLETED, 1.0)
    assert task.result == {"echo": {"x": [1, 2]}}
    worker = Worker.objects.get()
    assert task.owner == worker.name and worker.stopped is not None
    assert worker.queues == ["t-echo"]


def test_an_exception_aborts_with_its_type_message_and_traceback():
    task = Task.objects.submit("t-fail", {"n": 1})
    TaskWorker(WorkerOptions(["t-fail"])).run(once=True)
    task.refresh_from_db()
    [error] = task.errors
    assert task.status == Status.ABORTED
    assert error["code"] == "exception"
    assert error["args"]["type"] == "builtins.ValueError"
    assert error["args"]["message"] == "bad input {'n': 1}"
    assert "worker_handlers.py" in error["args"]["traceback"]
    assert error["description"].startswith("ValueError: bad input")


def test_abort_records_its_code_description_and_args():
    task = Task.objects.submit("t-abort", {"day": 3})
    TaskWorker(WorkerOptions(["t-abort"])).run(once=True)
    task.refresh_from_db()
    assert task.status == Status.ABORTED
    assert task.errors == [{"code": "empty", "args": {"day": 3}, "description": "no rows matched"}]


def test_a_result_that_is_not_json_aborts_instead_of_crashing():
    task = Task.objects.submit("t-bad-result", {})
    TaskWorker(WorkerOptions(["t-bad-result"])).run(once=True)
    task.refresh_from_db()
    assert task.status == Status.ABORTED
    # The description in words, not the repr of a list of messages.
    assert task.errors == [
        {
            "code": "invalid_result",
            "args": {},
            "description": "result holds a set, which is not JSON.",
        }
    ]
    # The same from a run in the foreground (scylla_run, scylla_django.testing).
    again = Task.objects.submit("t-bad-result", {})
    assert run_task(again.rn).errors == task.errors


def test_it_leases_only_up_to_its_concurrency_and_sends_progress():
    for n in range(5):
        Task.objects.submit("t-sleep", {"seconds": 0.6}, rn=f"s{n}")
    worker = TaskWorker(
        WorkerOptions(
            ["t-sleep"], concurrency=2, prefetch=0, heartbeat_interval=0.1, poll_interval=0.05
        )
    )
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.filter(status=Status.RUNNING).count() == 2, what="2 running")
    wait_until(
        lambda: Task.objects.filter(status=Status.RUNNING, progress__gt=0).exists(),
        what="progress from a heartbeat",
    )
    for _ in range(10):
        assert Task.objects.filter(status=Status.RUNNING).count() <= 2
        threading.Event().wait(0.05)
    wait_until(lambda: Task.objects.filter(status=Status.COMPLETED).count() == 5, what="all done")
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert set(Task.objects.values_list("leases", flat=True)) == {1}


def test_max_tasks_stops_after_that_many():
    for n in range(4):
        Task.objects.submit("t-echo", n)
    TaskWorker(WorkerOptions(["t-echo"], concurrency=3, max_tasks=2, poll_interval=0.05)).run()
    assert Task.objects.filter(status=Status.COMPLETED).count() == 2
    assert Task.objects.filter(status=Status.READY).count() == 2


def test_an_outcome_is_written_at_once_when_no_other_handler_is_running():
    """`write_wait` gathers outcomes of handlers still running; with none, nothing can join."""
    for n in range(3):
        Task.objects.submit("t-echo", {"n": n})
    worker = TaskWorker(
        WorkerOptions(
            ["t-echo"],
            concurrency=1,
            write_wait=600.0,
            lease_length=timedelta(hours=2),  # a write_wait under a tenth of the lease
            poll_interval=0.05,
            max_tasks=3,
        )
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(timeout=120)  # one write_wait per task would take half an hour
    assert not thread.is_alive()
    assert Task.objects.filter(status=Status.COMPLETED).count() == 3


def test_cancel_reaches_the_handler_on_the_next_heartbeat():
    task = Task.objects.submit("t-sleep", {"seconds": 30})
    worker = TaskWorker(WorkerOptions(["t-sleep"], heartbeat_interval=0.2, poll_interval=0.05))
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.RUNNING, what="running")
    Task.objects.get(pk=task.pk).cancel()
    wait_until(lambda: not worker._slots.in_hand(), timeout=60, what="the handler to stop")
    worker.stop()
    thread.join(10)
    task.refresh_from_db()
    assert task.status == Status.CANCELLED
    assert History.objects.filter(task=task).last().typ == EventType.CANCELLATION


def test_stop_yields_running_tasks_and_marks_the_worker_stopped():
    task = Task.objects.submit("t-sleep", {"seconds": 30})
    worker = TaskWorker(
        WorkerOptions(["t-sleep"], heartbeat_interval=0.2, poll_interval=0.05, grace_period=5)
    )
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.RUNNING, what="running")
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    task.refresh_from_db()
    assert task.status == Status.RUNNING  # until the monitor's next pass
    assert History.objects.filter(task=task).last().typ == EventType.YIELD
    assert Task.objects.reset_expired() == 1
    task.refresh_from_db()
    assert task.status == Status.READY
    assert not History.objects.filter(task=task, typ=EventType.TIMEOUT).exists()
    assert Worker.objects.get().stopped is not None


def test_failed_heartbeats_make_the_worker_give_the_task_up(monkeypatch, settings):
    settings.SCYLLA = {"HEARTBEAT_FAILURES": 2}
    task = Task.objects.submit("t-sleep", {"seconds": 30})

    def broken(self, *args, **kwargs):
        raise OperationalError("connection refused")

    worker = TaskWorker(WorkerOptions(["t-sleep"], heartbeat_interval=0.1, poll_interval=0.05))
    thread = start_worker(worker)
    wait_until(lambda: worker.in_flight_count() == 1, what="leased")
    monkeypatch.setattr(TaskQuerySet, "heartbeat_many", broken)
    wait_until(lambda: not worker._slots.in_hand(), timeout=60, what="the task to be given up")
    worker.stop()
    thread.join(10)
    task.refresh_from_db()
    # Nothing more was written: the lease runs out and the monitor will reset it.
    assert (task.status, task.owner) == (Status.RUNNING, Worker.objects.get().name)


def test_a_task_finished_receiver_that_raises_never_keeps_a_slot(caplog):
    """A receiver of `task_finished` runs once the outcome is committed: what it raises is
    logged with its traceback and is not the task's. The slot is freed: `--once` returns, and
    a worker that goes on (its handler thread writing and leasing itself) runs the next task."""
    from scylla_django import signals

    def receiver(sender, task, **kwargs):
        if task.status == Status.ABORTED:
            raise RuntimeError("a receiver's bug")

    def returns(worker: TaskWorker, **kwargs) -> None:
        thread = start_worker(worker, **kwargs)
        thread.join(20)
        assert not thread.is_alive(), "the worker never returned"
        assert worker.in_flight_count() == 0

    options = WorkerOptions(["t-abort", "t-echo"], concurrency=1, poll_interval=0.05)
    signals.task_finished.connect(receiver)
    try:
        for attempt in ("once", "on"):
            Task.objects.submit("t-abort", {"day": 1}, rn=f"abort-{attempt}", priority=255)
            Task.objects.submit("t-echo", {}, rn=f"echo-{attempt}")
            if attempt == "once":
                returns(TaskWorker(options), once=True)
                returns(TaskWorker(options), once=True)
            else:
                returns(TaskWorker(dataclasses.replace(options, max_tasks=2)))
            assert Task.objects.get(rn=f"abort-{attempt}").status == Status.ABORTED
            assert Task.objects.get(rn=f"echo-{attempt}").status == Status.COMPLETED
    finally:
        signals.task_finished.disconnect(receiver)
    failures = [r for r in caplog.records if r.exc_info and r.exc_info[0] is RuntimeError]
    assert [str(r.exc_info[1]) for r in failures] == ["a receiver's bug"] * 2
    assert "could not yield" not in caplog.text


def test_the_context_raises_the_reason_it_was_stopped():
    task = Task.objects.submit("t-echo", 1)
    worker = Worker.objects.register(["t-echo"])
    [task] = Task.objects.lease(worker, ["t-echo"])
    ctx = TaskContext(task, worker)
    ctx.check()
    ctx.set_progress(0.5)
    assert ctx.progress == 0.5
    ctx.stop(TaskCancelled("cancelled"))
    ctx.stop(LeaseLost("later reasons do not replace the first"))
    with pytest.raises(TaskCancelled):
        ctx.check()


def test_a_queue_without_a_handler_is_refused():
    with pytest.raises(ValueError, match="no-such-queue"):
        TaskWorker(WorkerOptions(["t-echo", "no-such-queue"]))
    with pytest.raises(CommandError, match="no-such-queue"):
        call_command("scylla_worker", "--queue", "no-such-queue", "--once")


@pytest.mark.parametrize(
    "args",
    [
        ["--queue", "bad queue"],
        ["--queue", "t-echo", "--concurrency", "0"],
        ["--queue", "t-echo", "--prefetch", "-1"],
        ["--queue", "t-echo", "--lease-length", "soon"],
        ["--queue", "t-echo", "--lease-length", "10s", "--heartbeat-interval", "20"],
        ["--queue", "t-echo", "--handlers", "no.such.module"],
    ],
)
def test_bad_worker_arguments_are_command_errors(args):
    with pytest.raises(CommandError):
        call_command("scylla_worker", *args, "--once")


def test_the_command_leases_once_with_once():
    for n in range(3):
        Task.objects.submit("t-echo", n)
    call_command(
        "scylla_worker",
        "--queue=t-echo",
        "--concurrency=3",
        "--once",
        "--handlers=tests.worker_handlers",
        verbosity=0,
    )
    assert Task.objects.filter(status=Status.COMPLETED).count() == 3


def test_one_handler_per_queue():
    registry = HandlerRegistry()

    @handler("q1", "q2", registry=registry)
    def first(ctx):
        return 1

    def second(ctx):
        return 2

    assert registry.queues() == ["q1", "q2"]
    with pytest.raises(HandlerAlreadyRegistered):
        registry.register("q1", second)
    with pytest.raises(TypeError):
        handler()


def test_lease_length_from_the_worker():
    """The worker's lease is a reservation (here half the lease) until its heartbeat reports the
    handler's start; from then on each heartbeat extends it by the worker's lease length."""
    task = Task.objects.submit("t-sleep", {"seconds": 30})
    options = WorkerOptions(
        ["t-sleep"], lease_length=timedelta(seconds=42), heartbeat_interval=0.2, poll_interval=0.05
    )
    assert options.reservation == timedelta(seconds=21)
    worker = TaskWorker(options)
    thread = start_worker(worker)
    worker.hooks.wait_for("started")
    beats = worker.hooks.count("beat")
    worker.hooks.wait_for("beat", beats + 2)  # one sent after the start reports it
    running = Task.objects.get(pk=task.pk)
    assert running.handler_started
    assert running.deadline - running.updated == timedelta(seconds=42)
    task.cancel()
    worker.stop()
    thread.join(10)


def test_async_handlers_run_many_at_once_on_one_event_loop_thread():
    tasks = [Task.objects.submit("t-async", {"seconds": 0.5}) for _ in range(6)]
    worker = TaskWorker(WorkerOptions(["t-async"], concurrency=6, poll_interval=0.05))
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.filter(status=Status.RUNNING).count() == 6, what="6 at once")
    wait_until(
        lambda: Task.objects.filter(status=Status.COMPLETED).count() == 6, what="all completed"
    )
    worker.stop()
    thread.join(10)
    threads = {Task.objects.get(pk=t.pk).result["thread"] for t in tasks}
    assert len(threads) == 1  # one event loop thread ran all six


def test_an_async_handler_sees_a_cancel_through_ctx_check():
    task = Task.objects.submit("t-async", {"seconds": 30})
    worker = TaskWorker(WorkerOptions(["t-async"], heartbeat_interval=0.1, poll_interval=0.05))
    thread = start_worker(worker)
    wait_until(lambda: Task.objects.get(pk=task.pk).status == Status.RUNNING, what="running")
    Task.objects.get(pk=task.pk).cancel()
    wait_until(lambda: not worker._slots.in_hand(), timeout=60, what="the handler to stop")
    worker.stop()
    thread.join(10)
    assert Task.objects.get(pk=task.pk).status == Status.CANCELLED


def test_an_async_handler_s_progress_and_outcomes_are_a_plain_handler_s():
    """A progress set between awaits is sent with the heartbeats; a returned value, Abort and
    any other exception end the task as they would from a plain handler."""
    registry = HandlerRegistry()
    released = threading.Event()

    async def run(ctx):
        import asyncio

        ctx.set_progress(0.5)
        while not released.is_set():
            await asyncio.sleep(0.01)
        if ctx.spec["how"] == "abort":
            raise Abort("empty", "nothing matched", args={"day": 3})
        if ctx.spec["how"] == "raise":
            raise KeyError("missing")
        return {"ok": True}

    registry.register("async-outcomes", run)
    tasks = {
        how: Task.objects.submit("async-outcomes", {"how": how})
        for how in ("return", "abort", "raise")
    }
    worker = TaskWorker(
        WorkerOptions(
            ["async-outcomes"],
            registry=registry,
            concurrency=3,
            heartbeat_interval=0.1,
            poll_interval=0.05,
        )
    )
    thread = start_worker(worker)
    try:
        wait_until(
            lambda: Task.objects.filter(status=Status.RUNNING, progress=0.5).count() == 3,
            what="the progress of all three, running at once",
        )
        released.set()
        wait_until(
            lambda: not Task.objects.filter(status__in=[Status.READY, Status.RUNNING]).exists(),
            what="all three finished",
        )
    finally:
        released.set()
        worker.stop()
        thread.join(10)
    done = {how: Task.objects.get(pk=task.pk) for how, task in tasks.items()}
    assert done["return"].status == Status.COMPLETED and done["return"].result == {"ok": True}
    assert done["abort"].status == Status.ABORTED
    assert done["abort"].errors == [
        {"code": "empty", "args": {"day": 3}, "description": "nothing matched"}
    ]
    assert done["raise"].status == Status.ABORTED
    [error] = done["raise"].errors
    assert error["code"] == "exception" and error["args"]["type"] == "builtins.KeyError"


def test_a_task_leased_with_a_refused_outcome_runs_even_if_reading_why_fails(monkeypatch, caplog):
    """The thread that ran a task writes its outcome and leases the next in one call. The
    outcome is refused (the lease was taken over while the handler ran), and reading why
    fails: the task leased by the same call is still the worker's, and runs."""
    registry = HandlerRegistry()
    ran: list[int] = []

    def run(ctx):
        ran.append(ctx.task.spec["n"])
        if ctx.task.spec["n"] == 0:  # its lease is taken over: the outcome will be refused
            Task.objects.filter(pk=ctx.task.pk).update(leases=F("leases") + 1)

    registry.register("refused", run)
    real = TaskQuerySet.refusals
    failures = []

    def refusals(self, worker, leases):
        # The handler thread's read, after its statement; not a refused heartbeat's.
        if not failures and threading.current_thread().name.startswith("scylla-task"):
            failures.append(leases)
            raise OperationalError("the connection dropped")
        return real(self, worker, leases)

    monkeypatch.setattr(TaskQuerySet, "refusals", refusals)
    first = Task.objects.submit("refused", {"n": 0})
    second = Task.objects.submit("refused", {"n": 1})
    worker = TaskWorker(
        WorkerOptions(["refused"], registry=registry, prefetch=0, poll_interval=0.05, max_tasks=2)
    )
    caplog.set_level("INFO", logger="scylla_django")
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(lambda: Task.objects.get(pk=second.pk).status == Status.COMPLETED, 20)
    finally:
        worker.stop()
        thread.join(10)
    assert ran == [0, 1] and failures
    assert Task.objects.get(pk=first.pk).status == Status.RUNNING  # not ours to finish
    assert "1 completed, 1 not written" in caplog.text
    assert "reading why failed: the connection dropped" in caplog.text


def test_the_writer_leases_into_the_slots_the_outcomes_it_writes_free_in_the_same_call(
    monkeypatch,
):
    """Several threads: the writer writes several outcomes together and leases into the slots they
    free in one call (on PostgreSQL, one statement and one commit), and hands the tasks out;
    the lease loop, polling rarely here, only makes the first lease."""
    registry = HandlerRegistry()
    together = threading.Barrier(4, timeout=5)

    def in_step(ctx):
        with contextlib.suppress(threading.BrokenBarrierError):
            together.wait()  # the four finish together: their outcomes are written together

    registry.register("step", in_step)
    refills: list[tuple[str, int, int, int]] = []
    leases: list[str] = []
    finish_and_lease, lease = TaskQuerySet.finish_and_lease, TaskQuerySet.lease

    def spied_finish_and_lease(self, worker, outcomes, queues, **kwargs):
        finished, tasks = finish_and_lease(self, worker, outcomes, queues, **kwargs)
        name = threading.current_thread().name
        refills.append((name, len(outcomes), kwargs["limit"], len(tasks)))
        return finished, tasks

    def spied_lease(self, *args, **kwargs):
        leases.append(threading.current_thread().name)
        return lease(self, *args, **kwargs)

    monkeypatch.setattr(TaskQuerySet, "finish_and_lease", spied_finish_and_lease)
    monkeypatch.setattr(TaskQuerySet, "lease", spied_lease)
    Task.objects.submit_many({"queue": "step", "spec": {"n": n}} for n in range(40))
    TaskWorker(
        WorkerOptions(
            ["step"], registry=registry, concurrency=4, prefetch=0, poll_interval=30, max_tasks=40
        )
    ).run()

    assert Task.objects.filter(status=Status.COMPLETED).count() == 40
    assert History.objects.filter(typ=EventType.ASSIGNMENT).count() == 40  # no task twice
    assert {name for name, *_ in refills} == {"scylla-writer"}
    assert all(limit <= 4 and got <= limit for _, _, limit, got in refills)
    assert sum(got for *_, got in refills) == 36  # all but the first lease's four
    assert leases.count("MainThread") == 1


@pytest.mark.postgres
def test_the_thread_that_ran_a_task_writes_its_outcome_and_leases_the_next_on_its_own_session(
    monkeypatch,
):
    """One thread per worker: the handler thread writes each outcome itself and leases the
    next task in the same call (no hand-off to the writer and back to the lease loop; on
    PostgreSQL, one statement), on a session of its own
    kept open across tasks. The handler's own queries get Django's usual connection, closed
    after each task under CONN_MAX_AGE = 0, and never the worker's session."""
    from django.db import connection, connections

    registry = HandlerRegistry()
    handler_sessions: list[tuple[str, int]] = []

    def query(ctx):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            handler_sessions.append((threading.current_thread().name, cursor.fetchone()[0]))

    registry.register("direct", query)
    finishes: list[tuple[str, int]] = []
    calls: list[str] = []

    def spy(name):
        real = getattr(TaskQuerySet, name)

        def spied(self, worker, outcomes, *args, **kwargs):
            with connections[self.db].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                finishes.append((threading.current_thread().name, cursor.fetchone()[0]))
            calls.append(name)
            return real(self, worker, outcomes, *args, **kwargs)

        monkeypatch.setattr(TaskQuerySet, name, spied)

    spy("finish_many")
    spy("finish_and_lease")
    Task.objects.submit_many({"queue": "direct", "spec": {"n": n}} for n in range(10))
    TaskWorker(
        WorkerOptions(["direct"], registry=registry, prefetch=0, poll_interval=0.05, max_tasks=10)
    ).run()

    assert Task.objects.filter(status=Status.COMPLETED).count() == 10
    assert {thread for thread, _ in finishes} == {"scylla-task-0"}
    # Each outcome with the next lease, in one call; the last alone (max_tasks reached).
    assert calls == ["finish_and_lease"] * 9 + ["finish_many"]
    assert len({pid for _, pid in finishes}) == 1  # one session, kept open
    assert len({pid for _, pid in handler_sessions}) == 10  # closed after each task
    assert not {pid for _, pid in finishes} & {pid for _, pid in handler_sessions}
    assert History.objects.filter(typ=EventType.ASSIGNMENT).count() == 10  # no task twice


def _recording(registry: HandlerRegistry, queue: str, seconds: float) -> dict[str, object]:
    """Register a handler of `queue` that sleeps `seconds` (or its spec's); what it saw: the
    specs it ran and the most handlers running at once."""
    seen: dict[str, object] = {"ran": [], "running": 0, "most": 0}
    lock = threading.Lock()

    def run(ctx):
        with lock:
            seen["ran"].append(ctx.task.spec["n"])
            seen["running"] += 1
            seen["most"] = max(seen["most"], seen["running"])
        try:
            time.sleep(ctx.task.spec.get("seconds", seconds))
        finally:
            with lock:
                seen["running"] -= 1

    registry.register(queue, run)
    return seen


def _prefetching(worker: TaskWorker) -> TaskWorker:
    """`worker` with its prefetch on at its full size from its first lease, as after quick
    runs of no-op handlers. A quick task run first would turn it on only on a machine fast
    enough: under load a handler that returns at once may take over `QUICK` and leave the
    prefetch off or smaller (how runs size it: the fifty-milliseconds test below)."""
    for _ in range(worker.options.concurrency):
        worker._slots.ran(0.0001)
    return worker


def test_prefetched_tasks_wait_for_a_handler_and_their_leases_are_kept_alive():
    """Concurrency 1 and prefetch 3: four tasks leased at once, run one at a time; the last
    starts after a lease length, its lease extended by the heartbeats."""
    registry = HandlerRegistry()
    seen = _recording(registry, "prefetched", 0.6)
    tasks = [Task.objects.submit("prefetched", {"n": n}) for n in range(4)]
    worker = _prefetching(
        TaskWorker(
            WorkerOptions(
                ["prefetched"],
                registry=registry,
                concurrency=1,
                prefetch=3,
                lease_length=timedelta(seconds=1.5),
                heartbeat_interval=0.2,
                poll_interval=0.05,
            )
        )
    )
    thread = start_worker(worker)
    try:
        wait_until(
            lambda: Task.objects.filter(status=Status.COMPLETED).count() == 4, what="all done"
        )
    finally:
        worker.stop()
        thread.join(10)
    assert seen["most"] == 1 and sorted(seen["ran"]) == [0, 1, 2, 3]
    # All four were leased before the first finished: held at once, three waiting for the
    # handler, the last for more than a lease length (1.8 s of the three before it).
    events = History.objects.filter(task__in=tasks)
    leased = list(events.filter(typ=EventType.ASSIGNMENT).values_list("time", flat=True))
    done = list(events.filter(typ=EventType.COMPLETION).values_list("time", flat=True))
    assert len(leased) == len(done) == 4 and max(leased) <= min(done)
    assert set(Task.objects.values_list("leases", flat=True)) == {1}
    assert not History.objects.filter(typ=EventType.TIMEOUT).exists()


def test_a_prefetched_task_cancelled_before_its_turn_never_runs():
    registry = HandlerRegistry()
    seen = _recording(registry, "prefetched", 1.0)
    first = Task.objects.submit("prefetched", {"n": 0})
    second = Task.objects.submit("prefetched", {"n": 1})
    worker = _prefetching(
        TaskWorker(
            WorkerOptions(
                ["prefetched"],
                registry=registry,
                concurrency=1,
                prefetch=1,
                heartbeat_interval=0.1,
                poll_interval=0.05,
            )
        )
    )
    thread = start_worker(worker)
    try:
        wait_until(lambda: seen["ran"] == [0], what="the first handler")
        assert Task.objects.get(pk=second.pk).status == Status.RUNNING  # prefetched
        Task.objects.get(pk=second.pk).cancel()
        wait_until(
            lambda: Task.objects.get(pk=first.pk).status == Status.COMPLETED, what="the first"
        )
        wait_until(lambda: not worker._slots.in_hand(), what="the second given up")
    finally:
        worker.stop()
        thread.join(10)
    assert seen["ran"] == [0]
    assert Task.objects.get(pk=second.pk).status == Status.CANCELLED


def test_stop_yields_the_prefetched_tasks_without_running_them():
    registry = HandlerRegistry()
    seen = _recording(registry, "prefetched", 0.5)
    tasks = [Task.objects.submit("prefetched", {"n": n}) for n in range(3)]
    worker = _prefetching(
        TaskWorker(WorkerOptions(["prefetched"], registry=registry, concurrency=1, prefetch=2))
    )
    thread = start_worker(worker)
    try:
        wait_until(lambda: seen["ran"] == [0], what="the first handler")
        assert Task.objects.filter(status=Status.RUNNING).count() == 3
    finally:
        worker.stop()
        thread.join(10)
    assert seen["ran"] == [0]
    # The running one yielded and, finishing within the grace period, still completed.
    assert Task.objects.get(pk=tasks[0].pk).status == Status.COMPLETED
    for task in tasks[1:]:
        assert History.objects.filter(task=task).last().typ == EventType.YIELD
    assert Task.objects.reset_expired() == 2


def test_tasks_prefetched_behind_a_slow_task_are_given_back_to_other_workers():
    """Concurrency 1, prefetch 3: a task found slow only once it runs holds no task behind it
    for long. Past `GIVE_BACK` the three waiting are given back (yielded, never run here): the
    monitor's next pass makes them ready, and a second worker runs them while the first still
    runs the slow one."""
    registry = HandlerRegistry()
    seen = _recording(registry, "prefetched", 0)
    slow = Task.objects.submit("prefetched", {"n": 0, "seconds": 6})
    behind = [Task.objects.submit("prefetched", {"n": n}) for n in (1, 2, 3)]
    options = WorkerOptions(
        ["prefetched"], registry=registry, concurrency=1, prefetch=3, poll_interval=0.05
    )
    first = _prefetching(TaskWorker(options))
    threads = [start_worker(first)]
    second = None
    try:
        wait_until(lambda: seen["ran"] == [0], what="the slow task")
        wait_until(
            lambda: Task.objects.filter(status=Status.RUNNING).count() == 4, what="3 prefetched"
        )
        owners = set(Task.objects.filter(status=Status.RUNNING).values_list("owner", flat=True))
        assert owners == {first.name}
        yielded = History.objects.filter(task__in=behind, typ=EventType.YIELD)
        wait_until(lambda: yielded.count() == 3, what="the three given back", timeout=2.5)
        assert Task.objects.reset_expired() == 3  # the monitor's pass
        second = TaskWorker(dataclasses.replace(options, prefetch=0))
        threads.append(start_worker(second))
        wait_until(
            lambda: (
                Task.objects.filter(pk__in=[t.pk for t in behind], status=Status.COMPLETED).count()
                == 3
            ),
            what="the three run elsewhere",
            timeout=2,
        )
        assert Task.objects.get(pk=slow.pk).status == Status.RUNNING  # still running
        for task in behind:
            events = list(History.objects.filter(task=task).values_list("typ", "worker"))
            assert events[:2] == [(EventType.ASSIGNMENT, first.name), (EventType.YIELD, first.name)]
            assert Task.objects.get(pk=task.pk).owner == second.name
        wait_until(
            lambda: Task.objects.get(pk=slow.pk).status == Status.COMPLETED, what="the slow task"
        )
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.stop()
        for thread in threads:
            thread.join(10)
    assert sorted(seen["ran"]) == [0, 1, 2, 3]  # each once: the given back ran only there


def test_slow_handlers_get_no_prefetch():
    """A slow task holds no task leased behind it: the prefetch waits for quick handlers."""
    registry = HandlerRegistry()
    seen = _recording(registry, "prefetched", 0.3)
    Task.objects.submit_many({"queue": "prefetched", "spec": {"n": n}} for n in range(3))
    worker = TaskWorker(
        WorkerOptions(["prefetched"], registry=registry, prefetch=8, poll_interval=0.05)
    )
    thread = start_worker(worker)
    try:
        while Task.objects.exclude(status=Status.COMPLETED).exists():
            assert Task.objects.filter(status=Status.RUNNING).count() <= 1
            time.sleep(0.02)
    finally:
        worker.stop()
        thread.join(10)
    assert sorted(seen["ran"]) == [0, 1, 2]


def test_prefetch_must_not_be_negative_nor_write_wait_near_the_lease_length():
    with pytest.raises(ValueError, match="prefetch must be 0 or more"):
        WorkerOptions(["t-echo"], prefetch=-1)
    with pytest.raises(ValueError, match="under a tenth of the lease length"):
        WorkerOptions(["t-echo"], lease_length=timedelta(seconds=1), write_wait=0.2)
    WorkerOptions(["t-echo"], lease_length=timedelta(seconds=3), write_wait=0.2)


def test_the_prefetch_holds_about_fifty_milliseconds_of_work_per_handler():
    """Quick runs size the prefetch by their pace, up to `prefetch`; a slow run turns it off."""
    slots = Slots(concurrency=2, max_tasks=None, on_free=lambda: None, prefetch=64)
    assert slots.capacity() == 2  # no run seen yet
    slots.ran(0.0002)
    assert slots.capacity() == 2  # one quick run of two handlers' worth
    slots.ran(0.0002)
    assert slots.capacity() == 2 + 64  # no-op runs: the whole prefetch
    for _ in range(40):
        slots.ran(0.01)
    assert slots.capacity() == 2 + 10  # 10 ms runs: five per handler
    slots.ran(0.3)
    assert slots.capacity() == 2


def test_at_the_defaults_one_statement_leases_dozens_of_quick_tasks():
    """A worker with the default options (concurrency 1) over 300 quick tasks: after its
    first quick run each lease takes up to 65, so the 300 are leased in a handful of
    statements (the tasks one statement leases share its lease time)."""
    Task.objects.submit_many({"queue": "t-echo", "spec": {"n": n}} for n in range(300))
    worker = TaskWorker(WorkerOptions(["t-echo"]))
    thread = start_worker(worker)
    try:
        wait_until(
            lambda: Task.objects.filter(status=Status.COMPLETED).count() == 300, what="all done"
        )
    finally:
        worker.stop()
        thread.join(10)
    leases = History.objects.filter(typ=EventType.ASSIGNMENT)
    assert leases.count() == 300
    statements = leases.values("time").distinct().count()
    assert statements <= 12, f"{statements} lease statements for 300 tasks"
