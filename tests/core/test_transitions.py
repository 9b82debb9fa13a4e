"""Every allowed and every forbidden transition of SPEC §3, with the History rows each writes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db.models.functions import Now

from scylla_django.enums import TRANSITIONS, EventType, Operation, Status
from scylla_django.exceptions import (
    DuplicateTask,
    InvalidTransition,
    LeaseLost,
    TaskCancelled,
    TaskNotFound,
)
from scylla_django.models import History, Task
from tests.factories import TaskFactory, running_task
from tests.helpers import expire

pytestmark = pytest.mark.django_db


def events(task: Task) -> list[tuple[str, str | None]]:
    return [(h.typ, h.worker) for h in History.objects.filter(task=task).order_by("id")]


def reload(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


# -- submit -------------------------------------------------------------------------------------


def test_submit_creates_a_ready_task_with_a_generated_rn():
    task = Task.objects.submit("emails", {"to": "a@b.c"}, priority=50)
    stored = reload(task)
    assert stored.status == Status.READY
    assert stored.priority == 50
    assert stored.spec == {"to": "a@b.c"}
    assert len(stored.rn) == 36  # a UUID
    assert stored.created == stored.updated == task.created
    assert (stored.progress, stored.leases, stored.owner, stored.deadline) == (0.0, 0, None, None)
    assert stored.errors == [] and stored.result is None
    assert events(stored) == []


def test_submit_uses_the_default_priority_setting(settings):
    settings.SCYLLA = {"DEFAULT_PRIORITY": 7}
    assert Task.objects.submit("q", 1).priority == 7


def test_resubmitting_an_rn_is_a_conflict_and_changes_nothing():
    first = Task.objects.submit("q", {"v": 1}, rn="order-233")
    with pytest.raises(DuplicateTask) as raised:
        Task.objects.submit("other", {"v": 2}, rn="order-233")
    assert raised.value.code == "duplicate_task"
    assert Task.objects.count() == 1
    assert reload(first).spec == {"v": 1}


def test_invalid_submission_names_every_bad_field_and_writes_nothing():
    with pytest.raises(ValidationError) as raised:
        Task.objects.submit("bad queue", None, priority=256, rn="no spaces allowed")
    assert set(raised.value.error_dict) == {"queue", "spec", "priority", "rn"}
    assert Task.objects.count() == 0


def test_submit_many_reports_each_item_and_inserts_the_valid_ones():
    TaskFactory(rn="exists")
    outcomes = Task.objects.submit_many(
        [
            {"queue": "q", "spec": 1, "rn": "a"},
            {"queue": "q", "spec": 2, "rn": "a"},  # duplicate within the batch
            {"queue": "q", "spec": 3, "rn": "exists"},  # duplicate in the database
            {"queue": "q q", "spec": 4},  # invalid queue
            {"queue": "q", "spec": 5, "colour": "red"},  # unknown field
            {"spec": 6},  # missing queue
            "not an object",
            {"queue": "q", "spec": 7},  # generated rn
        ]
    )
    assert [o.outcome for o in outcomes] == [
        "inserted",
        "duplicate",
        "duplicate",
        "invalid",
        "invalid",
        "invalid",
        "invalid",
        "inserted",
    ]
    assert [o.index for o in outcomes] == list(range(8))
    assert "queue" in outcomes[3].errors and "colour" in outcomes[4].errors
    assert "queue" in outcomes[5].errors
    assert Task.objects.count() == 3
    assert Task.objects.get(rn="a").spec == 1
    assert Task.objects.filter(rn=outcomes[7].rn, spec=7).exists()


def test_submit_many_with_nothing_to_insert():
    assert Task.objects.submit_many([]) == []
    assert [o.outcome for o in Task.objects.submit_many([{"queue": "-", "spec": 1}])] == ["invalid"]


# -- lease --------------------------------------------------------------------------------------


def test_lease_marks_running_with_owner_deadline_attempt_and_assignment(worker):
    task = TaskFactory()
    [leased] = Task.objects.lease(worker, ["default"], lease_length=timedelta(seconds=30))
    assert leased.pk == task.pk
    stored = reload(task)
    assert stored.status == Status.RUNNING
    assert stored.owner == worker.name
    assert stored.leases == 1
    # Both timestamps come from the same database clock reading.
    assert stored.deadline - stored.updated == timedelta(seconds=30)
    assert (leased.status, leased.owner, leased.deadline) == (
        stored.status,
        stored.owner,
        stored.deadline,
    )
    assert events(stored) == [(EventType.ASSIGNMENT, worker.name)]


def test_lease_uses_the_lease_length_setting(worker, settings):
    settings.SCYLLA = {"LEASE_LENGTH": timedelta(minutes=2)}
    TaskFactory()
    [leased] = Task.objects.lease(worker.name, ["default"])
    assert leased.deadline - leased.updated == timedelta(minutes=2)


def test_lease_returns_at_most_limit_and_nothing_when_empty(worker):
    for _ in range(5):
        TaskFactory()
    assert len(Task.objects.lease(worker, ["default"], limit=3)) == 3
    assert len(Task.objects.lease(worker, ["default"], limit=3)) == 2
    assert Task.objects.lease(worker, ["default"], limit=3) == []
    assert Task.objects.filter(status=Status.RUNNING).count() == 5


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"queues": []}, "invalid_queue"),
        ({"queues": "default"}, "invalid_queue"),
        ({"queues": ["a%"]}, "invalid_queue"),
        ({"queues": ["default"], "limit": 0}, "invalid_limit"),
        ({"queues": ["default"], "lease_length": 0}, "invalid_timeout"),
        ({"queues": ["default"], "lease_length": timedelta(seconds=-1)}, "invalid_timeout"),
    ],
)
def test_lease_rejects_bad_arguments(worker, kwargs, code):
    TaskFactory()
    with pytest.raises(ValidationError) as raised:
        Task.objects.lease(worker, **kwargs)
    assert raised.value.code == code
    assert Task.objects.get().status == Status.READY


# -- heartbeat ----------------------------------------------------------------------------------


def test_heartbeat_extends_the_deadline_and_records_progress(worker):
    task = running_task(worker, lease_length=5)
    task.heartbeat(worker, progress=0.4, lease_length=timedelta(seconds=60))
    stored = reload(task)
    assert stored.deadline - stored.updated == timedelta(seconds=60)
    assert stored.progress == 0.4
    assert (task.deadline, task.progress) == (stored.deadline, 0.4)
    task.heartbeat(worker.name)  # no progress: keeps the last one
    assert reload(task).progress == 0.4
    assert events(task) == [(EventType.ASSIGNMENT, worker.name)]  # heartbeats write no History


def test_heartbeat_after_the_deadline_but_before_a_reset_keeps_the_lease(worker):
    task = running_task(worker)
    expire(task)
    task.heartbeat(worker)
    stored = reload(task)
    assert stored.status == Status.RUNNING and stored.deadline > stored.updated
    assert Task.objects.reset_expired() == 0


def test_heartbeat_from_another_worker_is_lease_lost(worker, other_worker):
    task = running_task(worker)
    before = reload(task)
    with pytest.raises(LeaseLost) as raised:
        task.heartbeat(other_worker, progress=0.9)
    assert raised.value.code == "lease_lost"
    assert reload(task).deadline == before.deadline
    assert reload(task).progress == 0.0


def test_heartbeat_on_a_cancelled_task_says_cancelled(worker):
    task = running_task(worker)
    Task.objects.get(pk=task.pk).cancel()
    with pytest.raises(TaskCancelled) as raised:
        task.heartbeat(worker)
    assert raised.value.code == "task_cancelled"
    assert reload(task).status == Status.CANCELLED


def test_heartbeat_after_a_reset_is_lease_lost_and_does_not_resurrect(worker):
    task = running_task(worker)
    expire(task)
    assert Task.objects.reset_expired() == 1
    with pytest.raises(LeaseLost):
        task.heartbeat(worker, progress=0.5)
    stored = reload(task)
    assert (stored.status, stored.owner, stored.deadline, stored.progress) == (
        Status.READY,
        None,
        None,
        0.0,
    )


@pytest.mark.parametrize("progress", [-0.1, 1.01, float("nan"), "0.5", True])
def test_heartbeat_rejects_bad_progress(worker, progress):
    task = running_task(worker)
    with pytest.raises(ValidationError):
        task.heartbeat(worker, progress=progress)
    assert reload(task).progress == 0.0


# -- complete / abort ---------------------------------------------------------------------------


def test_complete_sets_progress_one_result_and_keeps_the_owner(worker):
    task = running_task(worker)
    task.heartbeat(worker, progress=0.3)
    task.complete(worker, result={"sent": 1})
    stored = reload(task)
    assert (stored.status, stored.progress, stored.result) == (Status.COMPLETED, 1.0, {"sent": 1})
    assert (stored.owner, stored.deadline) == (worker.name, None)
    assert events(task) == [
        (EventType.ASSIGNMENT, worker.name),
        (EventType.COMPLETION, worker.name),
    ]
    with pytest.raises(InvalidTransition) as raised:
        task.complete(worker)
    assert type(raised.value) is InvalidTransition


def test_complete_by_another_worker_is_lease_lost(worker, other_worker):
    task = running_task(worker)
    with pytest.raises(LeaseLost):
        task.complete(other_worker, result=1)
    assert reload(task).status == Status.RUNNING


def test_complete_after_cancel_keeps_the_task_cancelled(worker):
    task = running_task(worker)
    reload(task).cancel()
    with pytest.raises(TaskCancelled):
        task.complete(worker, result={"late": True})
    stored = reload(task)
    assert (stored.status, stored.result) == (Status.CANCELLED, None)


def test_abort_records_the_errors(worker):
    task = running_task(worker)
    task.abort(worker, [{"code": "empty", "args": {"day": 3}, "description": "no rows"}])
    stored = reload(task)
    assert stored.status == Status.ABORTED
    assert stored.errors == [{"code": "empty", "args": {"day": 3}, "description": "no rows"}]
    assert stored.owner == worker.name and stored.deadline is None
    assert events(task)[-1] == (EventType.ABORT, worker.name)


def test_abort_accepts_one_error_and_fills_defaults(worker):
    task = running_task(worker)
    task.abort(worker, {"code": "superseded"})
    assert reload(task).errors == [{"code": "superseded", "args": {}, "description": ""}]


@pytest.mark.parametrize(
    "errors",
    [[], None, [{"args": {}}], [{"code": ""}], ["text"], [{"code": "x", "extra": 1}]],
)
def test_abort_needs_valid_errors_and_writes_nothing_otherwise(worker, errors):
    task = running_task(worker)
    with pytest.raises(ValidationError):
        task.abort(worker, errors)
    stored = reload(task)
    assert (stored.status, stored.errors) == (Status.RUNNING, [])
    assert len(events(task)) == 1


# -- yield and reset ----------------------------------------------------------------------------


def test_yield_expires_the_lease_and_reset_writes_no_timeout(worker, other_worker):
    task = running_task(worker)
    task.heartbeat(worker, progress=0.1)
    task.yield_lease(worker)
    stored = reload(task)
    assert stored.status == Status.RUNNING
    assert stored.deadline == stored.updated - timedelta(seconds=1)
    yield_row = History.objects.filter(task=task).last()
    assert (yield_row.typ, yield_row.worker, yield_row.progress) == (
        EventType.YIELD,
        worker.name,
        0.1,
    )
    assert Task.objects.reset_expired() == 1
    stored = reload(task)
    assert (stored.status, stored.owner, stored.progress) == (Status.READY, None, 0.0)
    assert [typ for typ, _ in events(task)] == [EventType.ASSIGNMENT, EventType.YIELD]
    [again] = Task.objects.lease(other_worker, ["default"])
    assert (again.pk, again.leases) == (task.pk, 2)


def test_reset_expired_makes_ready_with_a_timeout_entry(worker):
    task = running_task(worker)
    task.heartbeat(worker, progress=0.23)
    fresh = running_task(worker)
    expire(task)
    assert Task.objects.reset_expired() == 1
    stored = reload(task)
    assert (stored.status, stored.owner, stored.deadline, stored.progress) == (
        Status.READY,
        None,
        None,
        0.0,
    )
    timeout = History.objects.filter(task=task).last()
    assert (timeout.typ, timeout.worker, timeout.progress) == (
        EventType.TIMEOUT,
        worker.name,
        0.23,
    )
    assert timeout.as_json()["_typ"] == "TaskTimeout"
    assert reload(fresh).status == Status.RUNNING
    assert Task.objects.reset_expired() == 0


def test_reset_expired_handles_several_chunks(worker):
    tasks = [running_task(worker) for _ in range(7)]
    Task.objects.update(deadline=Now() - timedelta(seconds=5))
    assert Task.objects.reset_expired(chunk_size=3) == 7
    assert all(reload(t).status == Status.READY for t in tasks)
    assert History.objects.filter(typ=EventType.TIMEOUT).count() == 7


def test_max_attempts_aborts_a_task_that_keeps_timing_out(worker, settings):
    settings.SCYLLA = {"MAX_LEASES": 2}
    task = TaskFactory()
    for attempt in (1, 2):
        [leased] = Task.objects.lease(worker, ["default"])
        assert leased.leases == attempt
        expire(leased)
        assert Task.objects.reset_expired() == 1
    stored = reload(task)
    assert stored.status == Status.ABORTED
    assert stored.errors[0]["code"] == "max_leases_exceeded"
    assert stored.owner == worker.name
    assert [typ for typ, _ in events(task)] == [
        EventType.ASSIGNMENT,
        EventType.TIMEOUT,
        EventType.ASSIGNMENT,
        EventType.TIMEOUT,
        EventType.ABORT,
    ]


def test_max_attempts_does_not_count_a_yield_as_a_failure(worker, settings):
    settings.SCYLLA = {"MAX_LEASES": 1}
    task = running_task(worker)
    task.yield_lease(worker)
    Task.objects.reset_expired()
    assert reload(task).status == Status.READY


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_a_ready_task(worker):
    task = TaskFactory()
    task.cancel()
    stored = reload(task)
    assert stored.status == Status.CANCELLED
    assert events(task) == [(EventType.CANCELLATION, None)]
    assert Task.objects.lease(worker, ["default"]) == []


def test_cancel_a_running_task_records_its_owner(worker):
    task = running_task(worker)
    reload(task).cancel()
    stored = reload(task)
    assert (stored.status, stored.deadline, stored.owner) == (Status.CANCELLED, None, worker.name)
    assert events(task)[-1] == (EventType.CANCELLATION, worker.name)


def test_cancel_of_a_deleted_task_is_not_found():
    task = TaskFactory()
    Task.objects.filter(pk=task.pk).delete()
    with pytest.raises(TaskNotFound):
        task.cancel()


# -- the whole table ----------------------------------------------------------------------------


def put_in(status: Status, worker) -> Task:
    """A task brought to `status` through the real transitions."""
    if status == Status.READY:
        return TaskFactory()
    task = running_task(worker)
    if status == Status.COMPLETED:
        task.complete(worker)
    elif status == Status.ABORTED:
        task.abort(worker, {"code": "x"})
    elif status == Status.CANCELLED:
        task.cancel()
    return reload(task)


OPERATIONS = {
    Operation.HEARTBEAT: lambda task, w: task.heartbeat(w),
    Operation.COMPLETE: lambda task, w: task.complete(w),
    Operation.ABORT: lambda task, w: task.abort(w, {"code": "x"}),
    Operation.YIELD: lambda task, w: task.yield_lease(w),
    Operation.CANCEL: lambda task, w: task.cancel(),
}


@pytest.mark.parametrize("status", list(Status))
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_transition_table(worker, status, operation):
    """Each operation succeeds exactly from the statuses the table allows, else changes nothing."""
    task = put_in(status, worker)
    before = reload(task)
    history_before = events(task)
    transition = TRANSITIONS[operation]
    if status in transition.sources:
        OPERATIONS[operation](task, worker)
        assert reload(task).status == transition.target
        expected_new = [] if transition.event is None else [transition.event]
        assert [typ for typ, _ in events(task)[len(history_before) :]] == expected_new
    else:
        with pytest.raises(InvalidTransition) as raised:
            OPERATIONS[operation](task, worker)
        if status == Status.CANCELLED and transition.owner_only:
            assert isinstance(raised.value, TaskCancelled)
        after = reload(task)
        assert (after.status, after.updated, after.deadline) == (
            before.status,
            before.updated,
            before.deadline,
        )
        assert events(task) == history_before


@pytest.mark.parametrize("status", [s for s in Status if s != Status.READY])
def test_only_ready_tasks_are_leased(worker, status):
    put_in(status, worker)
    assert Task.objects.lease(worker, ["default"]) == []


def test_cancel_a_selection_skips_terminal_tasks_and_records_each(worker):
    running = running_task(worker)
    done = running_task(worker)
    done.complete(worker)
    ready = TaskFactory()
    selection = Task.objects.filter(pk__in=[ready.pk, running.pk, done.pk])
    assert selection.cancel() == 2
    assert reload(ready).status == reload(running).status == Status.CANCELLED
    assert reload(done).status == Status.COMPLETED
    assert events(running)[-1] == (EventType.CANCELLATION, worker.name)
    assert events(ready) == [(EventType.CANCELLATION, None)]
    assert selection.cancel() == 0
    with pytest.raises(TaskCancelled):
        running.complete(worker)


def test_database_timestamps_compare_equal_to_themselves_as_parameters(worker):
    """What the database clock wrote, read back and sent as a parameter, matches exactly.

    SQLite stores timestamps as text: they must be written with microseconds, as Django writes
    parameters, or equal instants would compare unequal.
    """
    task = running_task(worker)
    stored = reload(task)
    for field in ("created", "updated", "deadline"):
        value = getattr(stored, field)
        assert Task.objects.filter(pk=task.pk, **{field: value}).exists(), field
        assert Task.objects.filter(pk=task.pk, **{f"{field}__gte": value}).exists(), field
    time = History.objects.get(task=task).time
    assert History.objects.filter(task=task, time=time).exists()


def test_signals_are_sent_after_commit(worker, django_capture_on_commit_callbacks):
    from scylla_django import signals

    received: list[tuple[str, str, str | None]] = []

    def receiver(signal_name):
        def receive(sender, task, status=None, **kwargs):
            received.append((signal_name, task.rn, status))

        return receive

    receivers = {
        name: receiver(name)
        for name in ("task_submitted", "task_leased", "task_finished", "task_reset")
    }
    for name, receive in receivers.items():
        getattr(signals, name).connect(receive, sender=Task)
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            Task.objects.submit("default", {}, rn="a")
            Task.objects.submit_many([{"queue": "default", "spec": {}, "rn": "b"}])
            [a, b] = Task.objects.lease(worker, ["default"], limit=2)
            a.complete(worker)
            expire(b)
            Task.objects.reset_expired()
        assert len(callbacks) == 5  # one for the lease of both tasks
        assert received == [
            ("task_submitted", "a", None),
            ("task_submitted", "b", None),
            ("task_leased", "a", None),
            ("task_leased", "b", None),
            ("task_finished", "a", "completed"),
            ("task_reset", "b", "ready"),
        ]
    finally:
        for name, receive in receivers.items():
            getattr(signals, name).disconnect(receive, sender=Task)
    with django_capture_on_commit_callbacks() as callbacks:
        Task.objects.submit("default", {}, rn="c")  # no receiver: nothing is scheduled
    assert callbacks == []


def test_a_receiver_that_raises_for_one_leased_task_still_hears_of_the_others(
    worker, caplog, django_capture_on_commit_callbacks
):
    """The tasks of one lease are announced from one callback: a receiver that raises for the
    first is logged with its traceback and still receives the second."""
    from scylla_django import signals

    heard: list[str] = []

    def receive(sender, task, **kwargs):
        heard.append(task.rn)
        if task.rn == "first":
            raise RuntimeError("a receiver's bug")

    Task.objects.submit("default", {}, rn="first", priority=9)
    Task.objects.submit("default", {}, rn="second")
    signals.task_leased.connect(receive, sender=Task)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            leased = Task.objects.lease(worker, ["default"], limit=2)
    finally:
        signals.task_leased.disconnect(receive, sender=Task)
    assert [t.rn for t in leased] == heard == ["first", "second"]
    [failure] = [r for r in caplog.records if r.exc_info]
    assert "task_leased" in failure.getMessage() and "first" in failure.getMessage()


@pytest.mark.django_db(transaction=True)
def test_a_batch_whose_items_fail_midway_inserts_none_of_them():
    def items():
        for n in range(1234):
            yield {"queue": "bulk", "spec": {"n": n}}
        raise RuntimeError("the source of the items failed")

    with pytest.raises(RuntimeError):
        Task.objects.submit_many(items())
    assert not Task.objects.filter(queue="bulk").exists()
    Task.objects.submit("bulk", {})  # the connection is usable
    assert Task.objects.filter(queue="bulk").count() == 1


def test_a_transition_without_a_history_event_has_none_to_record():
    from scylla_django.enums import TRANSITIONS, EventType, Operation

    assert TRANSITIONS[Operation.LEASE].recorded == EventType.ASSIGNMENT
    with pytest.raises(TypeError, match="records no History event"):
        _ = TRANSITIONS[Operation.HEARTBEAT].recorded
