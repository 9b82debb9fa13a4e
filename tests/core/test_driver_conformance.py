"""One contract for every database driver: the same cases run against the driver of the test
database (`db.driver("default")`: PostgreSQL's statements, or the ORM's path on SQLite and
MariaDB), each saying what an operation writes and what it refuses with nothing written.

The cases call the driver's operations directly, on tasks submitted the public way; a case
that needs a capability a driver lacks (`finishes_and_leases_at_once`,
`submits_keyed_in_one_statement`, `judges_caps_in_insert`) runs the composition the models
use there instead, and holds it to the same assertions.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import NotSupportedError

from scylla_django import db
from scylla_django.enums import EventType, Operation, Status
from scylla_django.models import History, QueueSetting, Task, Worker
from scylla_django.models.inputs import task_values
from scylla_django.models.task import TABLES

pytestmark = pytest.mark.django_db(transaction=True)

MINUTE = timedelta(minutes=1)


@pytest.fixture
def driver() -> db.Driver:
    return db.driver("default")


def lease(driver, worker: Worker, queues=("default",), limit=10, **options):
    settings = {"lease_length": MINUTE, "timeouts": {}, "timeout_grace": timedelta(0)}
    settings.update(options)
    return driver.lease(TABLES, terms(worker, queues, limit, **settings))


def terms(worker: Worker, queues=("default",), limit=10, **settings) -> db.LeaseTerms:
    return db.LeaseTerms(worker.pk, worker.name, list(queues), limit, **settings)


def history(task: Task) -> list[str]:
    return list(
        History.objects.filter(task_id=task.pk).order_by("id").values_list("typ", flat=True)
    )


def row(task: Task) -> dict:
    return Task.objects.filter(pk=task.pk).values(
        "status", "owner", "deadline", "timeout_at", "progress", "updated", "leases", "errors"
    )[0]


def outcome(task: Task, lease_number: int, **written) -> dict:
    found = {
        "id": task.pk,
        "lease": lease_number,
        "status": Status.COMPLETED,
        "result": None,
        "errors": None,
        "cpu_time": None,
        "peak_memory": None,
        "log": None,
    }
    found.update(written)
    return found


# -- choice -------------------------------------------------------------------------------------


def test_the_driver_is_chosen_once_per_alias(driver, vendor):
    assert db.driver("default") is driver
    assert driver.using == "default"
    assert driver.listens is (vendor == "postgresql")
    assert driver.enforces_unique_keys is (vendor != "mysql")


# -- one transition -----------------------------------------------------------------------------


def _fenced(task: Task, owner: str, lease_number: int):
    return Task.objects.filter(pk=task.pk, status=Status.RUNNING, owner=owner, leases=lease_number)


def _complete(driver, fenced):
    return driver.transition(
        fenced,
        History,
        {"updated": db.Clock(), "status": Status.COMPLETED, "progress": 1.0, "deadline": None},
        ["status", "progress", "deadline"],
        Operation.COMPLETE,
    )


def test_a_transition_fenced_on_another_lease_writes_nothing(driver, worker, other_worker):
    task = Task.objects.submit("default", {})
    [held] = lease(driver, worker)
    before = row(task)
    assert _complete(driver, _fenced(task, other_worker.name, held.leases)) is None
    assert _complete(driver, _fenced(task, worker.name, held.leases + 1)) is None
    assert row(task) == before
    assert history(task) == [EventType.ASSIGNMENT]


def test_a_transition_writes_the_row_and_its_history(driver, worker):
    task = Task.objects.submit("default", {})
    [held] = lease(driver, worker)
    written = _complete(driver, _fenced(task, worker.name, held.leases))
    assert written["status"] == Status.COMPLETED and written["progress"] == 1.0
    assert written["deadline"] is None and written["owner"] == worker.name
    assert row(task)["status"] == Status.COMPLETED
    assert history(task) == [EventType.ASSIGNMENT, EventType.COMPLETION]
    entry = History.objects.filter(task_id=task.pk).latest("id")
    assert (entry.worker, entry.time) == (worker.name, written["updated"])


# -- lease --------------------------------------------------------------------------------------


def test_a_lease_takes_the_best_first_up_to_its_limit(driver, worker):
    low = Task.objects.submit("default", {}, rn="low", priority=0)
    old = Task.objects.submit("default", {}, rn="old", priority=5)
    new = Task.objects.submit("default", {}, rn="new", priority=5)
    leased = lease(driver, worker, limit=2)
    assert [t.rn for t in leased] == [old.rn, new.rn]
    assert all(t.status == Status.RUNNING and t.owner == worker.name for t in leased)
    assert row(low)["status"] == Status.READY and history(low) == []
    assert [history(t) for t in (old, new)] == [[EventType.ASSIGNMENT]] * 2
    assert [t.rn for t in lease(driver, worker)] == [low.rn]
    assert lease(driver, worker) == []


def test_a_lease_passes_over_paused_and_full_queues_and_future_tasks(driver, worker):
    Task.objects.submit("paused", {})
    Task.objects.submit("later", {}, not_before=db.read_clock("default") + MINUTE)
    full = [Task.objects.submit("full", {}) for _ in range(3)]
    QueueSetting.objects.pause("paused")
    QueueSetting.objects.limit("full", 2)
    leased = lease(driver, worker, queues=["paused", "later", "full"])
    assert sorted(t.rn for t in leased) == sorted(t.rn for t in full[:2])
    assert lease(driver, worker, queues=["paused", "later", "full"]) == []


def test_a_worker_that_stopped_may_not_lease_and_nothing_is_written(driver, worker):
    task = Task.objects.submit("default", {})
    worker.stop()
    assert lease(driver, worker) is None
    assert row(task)["status"] == Status.READY and history(task) == []


@pytest.mark.keys
def test_a_lease_takes_a_lock_once(driver, worker):
    first = Task.objects.submit("default", {}, rn="first", locks=["printer"])
    second = Task.objects.submit("default", {}, rn="second", locks=["printer"])
    assert [t.rn for t in lease(driver, worker)] == [first.rn]
    assert row(second)["status"] == Status.READY and history(second) == []


def test_a_lease_is_capped_at_the_run_time_limit(driver, worker):
    limited = Task.objects.submit("default", {}, rn="limited", timeout=10)
    by_queue = Task.objects.submit("slow", {}, rn="by-queue")
    free = Task.objects.submit("default", {}, rn="free")
    grace = timedelta(seconds=2)
    leased = lease(
        driver,
        worker,
        queues=["default", "slow"],
        timeouts={"slow": timedelta(seconds=30)},
        timeout_grace=grace,
    )
    assert len(leased) == 3
    limited_row, queue_row, free_row = row(limited), row(by_queue), row(free)
    assert limited_row["timeout_at"] == limited_row["updated"] + timedelta(seconds=12)
    assert limited_row["deadline"] == limited_row["timeout_at"]  # the minute ends later
    assert queue_row["timeout_at"] == queue_row["updated"] + timedelta(seconds=32)
    assert free_row["timeout_at"] is None
    assert free_row["deadline"] == free_row["updated"] + MINUTE


def test_a_reservation_is_a_short_lease_whose_handler_has_not_started(driver, worker):
    task = Task.objects.submit("default", {})
    lease(driver, worker, reservation=timedelta(seconds=5))
    found = Task.objects.filter(pk=task.pk).values("deadline", "updated", "handler_started")[0]
    assert found["deadline"] == found["updated"] + timedelta(seconds=5)
    assert found["handler_started"] is False


def test_a_lease_by_rn_ignores_the_queue_s_settings_but_not_the_status(driver, worker):
    task = Task.objects.submit("paused", {})
    QueueSetting.objects.pause("paused")
    leased = driver.lease_rn(TABLES, worker.pk, worker.name, task.rn, MINUTE)
    assert leased.pk == task.pk and leased.status == Status.RUNNING
    assert driver.lease_rn(TABLES, worker.pk, worker.name, task.rn, MINUTE) is None
    assert history(task) == [EventType.ASSIGNMENT]


# -- heartbeat, yield ---------------------------------------------------------------------------


def test_a_heartbeat_extends_its_own_leases_only_and_never_past_the_limit(
    driver, worker, other_worker
):
    plain = Task.objects.submit("default", {}, rn="plain")
    limited = Task.objects.submit("default", {}, rn="limited", timeout=5)
    held = {t.rn: t for t in lease(driver, worker, lease_length=timedelta(seconds=3))}
    before = row(plain)
    leases = [
        (plain.pk, held["plain"].leases, 0.5, True),
        (limited.pk, held["limited"].leases, None, True),
    ]
    assert driver.heartbeat(TABLES, other_worker.name, leases, MINUTE) == set()
    stale = [(plain.pk, held["plain"].leases + 1, 0.9, True)]
    assert driver.heartbeat(TABLES, worker.name, stale, MINUTE) == set()
    assert row(plain) == before
    assert driver.heartbeat(TABLES, worker.name, leases, MINUTE) == {plain.pk, limited.pk}
    extended, capped = row(plain), row(limited)
    assert extended["progress"] == 0.5 and extended["deadline"] > before["deadline"]
    assert extended["deadline"] == extended["updated"] + MINUTE
    assert capped["deadline"] == capped["timeout_at"]  # the minute would pass the limit


def test_a_yield_gives_back_its_own_leases_only(driver, worker, other_worker):
    task = Task.objects.submit("default", {})
    [held] = lease(driver, worker)
    before = row(task)
    assert driver.yield_leases(TABLES, other_worker.name, [(task.pk, held.leases)]) == set()
    assert driver.yield_leases(TABLES, worker.name, [(task.pk, held.leases + 1)]) == set()
    assert row(task) == before
    assert driver.yield_leases(TABLES, worker.name, [(task.pk, held.leases)]) == {task.pk}
    given_back = row(task)
    assert given_back["status"] == Status.RUNNING
    assert given_back["deadline"] < given_back["updated"]
    assert history(task) == [EventType.ASSIGNMENT, EventType.YIELD]


# -- finish -------------------------------------------------------------------------------------


def test_finish_many_writes_each_matching_lease_and_nothing_else(driver, worker, other_worker):
    done = Task.objects.submit("default", {}, rn="done")
    failed = Task.objects.submit("default", {}, rn="failed")
    stale = Task.objects.submit("default", {}, rn="stale")
    held = {t.rn: t for t in lease(driver, worker)}
    errors = [{"code": "boom", "args": {}, "description": "it broke"}]
    rows = [
        outcome(done, held["done"].leases, result={"n": 1}),
        outcome(failed, held["failed"].leases, status=Status.ABORTED, errors=errors),
        outcome(stale, held["stale"].leases + 1),
    ]
    assert driver.finish(TABLES, other_worker.name, rows) == {}
    written = driver.finish(TABLES, worker.name, rows)
    assert set(written) == {done.pk, failed.pk}
    assert written[done.pk] == row(done)["updated"]
    assert row(done)["status"] == Status.COMPLETED and row(done)["progress"] == 1.0
    assert Task.objects.get(pk=done.pk).result == {"n": 1}
    assert row(failed)["status"] == Status.ABORTED and row(failed)["errors"] == errors
    assert row(stale)["status"] == Status.RUNNING
    assert history(done) == [EventType.ASSIGNMENT, EventType.COMPLETION]
    assert history(failed) == [EventType.ASSIGNMENT, EventType.ABORT]
    assert history(stale) == [EventType.ASSIGNMENT]
    assert driver.finish(TABLES, worker.name, rows) == {}  # written once


def test_finish_and_lease_finishes_then_leases_the_next(driver, worker):
    first = Task.objects.submit("default", {}, rn="first")
    [held] = lease(driver, worker, limit=1)
    following = Task.objects.submit("default", {}, rn="following")
    settings = {"lease_length": MINUTE, "timeouts": {}, "timeout_grace": timedelta(0)}
    rows = [outcome(first, held.leases)]
    if driver.finishes_and_leases_at_once:
        done, leased = driver.finish_and_lease(TABLES, terms(worker, limit=1, **settings), rows)
    else:  # the composition the models make here
        with pytest.raises(NotImplementedError):
            driver.finish_and_lease(TABLES, terms(worker, limit=1, **settings), rows)
        done = driver.finish(TABLES, worker.name, rows)
        leased = lease(driver, worker, limit=1)
    assert set(done) == {first.pk}
    assert [t.rn for t in leased] == [following.rn]
    assert row(first)["status"] == Status.COMPLETED
    assert history(first) == [EventType.ASSIGNMENT, EventType.COMPLETION]


# -- reset --------------------------------------------------------------------------------------


def _expire(task: Task, **values) -> None:
    now = db.read_clock("default")
    values.setdefault("deadline", now - timedelta(seconds=1))
    Task.objects.filter(pk=task.pk).update(**values)


def _reset(driver, tasks: list[Task], max_leases=None):
    with db.write_atomic("default"):
        rows = {
            found["pk"]: found
            for found in Task.objects.filter(pk__in=[t.pk for t in tasks])
            .select_for_update()
            .values(
                "pk",
                "owner",
                "progress",
                "leases",
                "snoozes",
                "handler_started",
                "unstarted",
                "queue",
                "deadline",
                "timeout_at",
                "updated",
            )
        }
        return driver.reset(TABLES, rows, max_leases)


def test_a_reset_makes_expired_and_yielded_leases_ready_and_leaves_limits_to_the_caller(
    driver, worker
):
    expired, given_back, timed_out = (
        Task.objects.submit("default", {}, rn=rn) for rn in ("expired", "given-back", "limit")
    )
    held = {t.rn: t for t in lease(driver, worker)}
    _expire(expired)
    driver.yield_leases(TABLES, worker.name, [(given_back.pk, held["given-back"].leases)])
    cap = db.read_clock("default") - timedelta(seconds=1)
    _expire(timed_out, deadline=cap, timeout_at=cap)
    clock, kinds = _reset(driver, [expired, given_back, timed_out])
    assert clock is not None
    assert kinds == {expired.pk: "expired", given_back.pk: "yielded", timed_out.pk: "timed_out"}
    for task in (expired, given_back):
        found = row(task)
        assert (found["status"], found["owner"], found["deadline"]) == (Status.READY, None, None)
        assert found["updated"] == clock
    assert history(expired) == [EventType.ASSIGNMENT, EventType.TIMEOUT]
    assert history(given_back) == [EventType.ASSIGNMENT, EventType.YIELD]
    assert row(timed_out)["status"] == Status.RUNNING  # the caller aborts it
    assert history(timed_out) == [EventType.ASSIGNMENT]


def test_a_reset_counts_leases_toward_max_leases(driver, worker):
    task = Task.objects.submit("default", {})
    lease(driver, worker)
    _expire(task, leases=3)
    _, kinds = _reset(driver, [task], max_leases=3)
    assert kinds == {task.pk: "exhausted"}
    assert row(task)["status"] == Status.RUNNING  # the caller aborts it


def test_a_reset_leaves_a_lease_that_is_no_longer_expired(driver, worker):
    task = Task.objects.submit("default", {})
    lease(driver, worker)
    _, kinds = _reset(driver, [task])  # the deadline is a minute away
    assert kinds == {}
    assert row(task)["status"] == Status.RUNNING
    assert history(task) == [EventType.ASSIGNMENT]


# -- submit -------------------------------------------------------------------------------------


def _values(rn: str, queue: str = "default", **options) -> dict:
    return task_values(queue, {"rn": rn}, rn=rn, **options)


def test_a_submission_inserts_once_per_rn(driver):
    inserted = driver.submit(Task.objects.all(), _values("one"))
    pk, created, updated = inserted
    task = Task.objects.get(rn="one")
    assert (task.pk, task.created, task.updated) == (pk, created, updated)
    assert task.status == Status.READY and task.spec == {"rn": "one"}
    assert driver.submit(Task.objects.all(), _values("one")) is None
    assert Task.objects.filter(rn="one").count() == 1


def test_a_submission_to_a_capped_queue_is_left_to_the_caller(driver):
    QueueSetting.objects.cap("capped", 5)
    tasks = Task.objects.all()
    if driver.judges_caps_in_insert:
        assert driver.submit(tasks, _values("c", "capped"), unless_capped=True) == db.CAPPED
        assert not Task.objects.filter(rn="c").exists()
    assert isinstance(driver.submit(tasks, _values("free", "default"), unless_capped=True), tuple)
    assert Task.objects.filter(rn="free").exists()


def test_a_bulk_submission_skips_taken_rns_and_leaves_capped_queues_out(driver):
    Task.objects.submit("default", {}, rn="taken")
    QueueSetting.objects.cap("capped", 5)
    items = [_values("a"), _values("taken"), _values("b"), _values("c", "capped")]
    sizes: list[int] = []

    def chunks(size):
        sizes.append(size)
        for start in range(0, len(items), size):
            yield items[start : start + size]

    left_out: set[str] = set()
    inserted = driver.submit_many(Task.objects.all(), chunks, left_out)
    assert sizes and sizes[0] > 0
    if driver.judges_caps_in_insert:
        assert (inserted, left_out) == ({"a", "b"}, {"c"})
    else:  # the caller looked the caps up first, and sends only what may go in
        assert (inserted, left_out) == ({"a", "b", "c"}, set())
    assert Task.objects.filter(rn="taken").count() == 1


def test_a_unique_key_is_held_by_one_task(driver):
    tasks = Task.objects.all()
    if not driver.enforces_unique_keys:
        with pytest.raises(NotSupportedError):
            Task.objects.submit("default", {}, unique_key="k")
        assert not Task.objects.exists()
        return
    if driver.submits_keyed_in_one_statement:
        inserted, _, _ = driver.submit_keyed(tasks, _values("first", unique_key="k"))
        assert inserted
        found, window_over, taken = driver.submit_keyed(tasks, _values("second", unique_key="k"))
        assert (found, window_over) == (False, False)
        assert taken[[f.attname for f in Task._meta.concrete_fields].index("rn")] == "first"
    else:  # the look-up and the insert in one write transaction, by the models
        assert Task.objects.submit("default", {}, rn="first", unique_key="k").submit_outcome == (
            "inserted"
        )
        duplicate = Task.objects.submit("default", {}, rn="second", unique_key="k")
        assert (duplicate.rn, duplicate.submit_outcome) == ("first", "duplicate")
    assert list(Task.objects.values_list("rn", flat=True)) == ["first"]
