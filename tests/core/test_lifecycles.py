"""Task lifecycles on the five states: snooze (a fenced give-back with a delay), children
(submitted with their parent's completion), results passed on to follow-ups, and expiry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db.models.functions import Now
from django.utils import timezone

from scylla_django.enums import EventType, Status
from scylla_django.exceptions import LeaseLost, Snooze
from scylla_django.followups import release_followups
from scylla_django.models import History, Outcome, Task
from scylla_django.monitor import Monitor
from tests.factories import TaskFactory, running_task
from tests.helpers import Stopwatch, expire, run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def typs(task: Task) -> list[str]:
    return list(History.objects.filter(task_id=task.pk).values_list("typ", flat=True))


# -- snooze ----------------------------------------------------------------------------------


def test_a_snooze_puts_the_task_back_to_ready_later_without_spending_anything(worker):
    task = running_task(worker, lease_length=30)
    assert task.snooze(worker, timedelta(minutes=5)) is True
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.owner, stored.deadline) == (Status.READY, None, None)
    assert (stored.leases, stored.attempt, stored.snoozes) == (1, 1, 1)
    # Five minutes from the write, on the database clock.
    assert stored.not_before - stored.updated == timedelta(minutes=5)
    assert stored.retry_of is None and not Task.objects.filter(retry_of=task.rn).exists()
    assert typs(task) == [EventType.ASSIGNMENT, EventType.SNOOZE]
    snoozed = History.objects.get(task_id=task.pk, typ=EventType.SNOOZE)
    assert snoozed.worker == worker.name and snoozed.time == stored.updated
    assert Task.objects.lease(worker, ["default"]) == []  # not before its delay


def test_a_snoozed_task_is_leased_again_once_due_and_completes(worker):
    task = running_task(worker)
    task.snooze(worker, 60)
    Task.objects.filter(pk=task.pk).update(not_before=Now())
    [again] = Task.objects.lease(worker, ["default"])
    assert (again.pk, again.leases, again.snoozes) == (task.pk, 2, 1)
    again.complete(worker, result="done")
    assert Task.objects.get(pk=task.pk).status == Status.COMPLETED


def test_a_snooze_is_fenced_on_the_lease(worker, other_worker):
    task = running_task(worker, lease_length=30)
    expire(task)
    assert Task.objects.reset_expired() == 1
    [second] = Task.objects.lease(other_worker, ["default"])
    with pytest.raises(LeaseLost, match="lease 1"):
        task.snooze(worker, 10)  # the stale lease
    stale = Task.objects.get(pk=task.pk)
    assert (stale.status, stale.owner, stale.snoozes) == (Status.RUNNING, other_worker.name, 0)
    with pytest.raises(LeaseLost):
        task.snooze(other_worker, 10, lease=1)  # the right worker, the wrong lease number
    assert second.snooze(other_worker, 10) is True
    with pytest.raises(LeaseLost):
        second.snooze(other_worker, 10)  # no longer held: it is ready
    assert Task.objects.get(pk=task.pk).snoozes == 1


@pytest.mark.parametrize("delay", [0, -5, "soon", float("nan"), True, 10**10])
def test_a_snooze_is_refused_when_built_with_a_bad_delay(delay):
    with pytest.raises(ValidationError) as raised:
        Snooze(delay)
    assert raised.value.code == "invalid_delay"
    assert raised.value.messages == [f"A delay must be a positive duration, not {delay!r}."]


def test_a_snooze_keeps_its_delay_as_a_timedelta():
    assert Snooze("30s").delay == Snooze(30).delay == timedelta(seconds=30)


@pytest.mark.parametrize("delay", [0, -5, "soon", None, float("nan"), True])
def test_a_snooze_delay_must_be_a_positive_duration(worker, delay):
    task = running_task(worker)
    with pytest.raises(ValidationError) as raised:
        task.snooze(worker, delay)
    assert raised.value.code == "invalid_delay"
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.snoozes) == (Status.RUNNING, 0)
    assert typs(task) == [EventType.ASSIGNMENT]


def test_max_snoozes_aborts_the_task_with_too_many_snoozes(worker, settings):
    settings.SCYLLA = {"MAX_SNOOZES": 2}
    task = TaskFactory(retry={"max_attempts": 5})
    for _ in range(2):
        [leased] = Task.objects.lease(worker, ["default"])
        assert leased.snooze(worker, 1) is True
        Task.objects.filter(pk=task.pk).update(not_before=None)
    [leased] = Task.objects.lease(worker, ["default"])
    assert leased.snooze(worker, 1) is False
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.snoozes, stored.leases) == (Status.ABORTED, 2, 3)
    assert stored.errors[0]["code"] == "too_many_snoozes"
    assert stored.errors[0]["args"] == {"max_snoozes": 2}
    assert not Task.objects.filter(retry_of=task.rn).exists()  # aborted for good


def time_out(worker) -> None:
    """Lease the ready task and let the lease run out; the monitor's reset judges it."""
    [leased] = Task.objects.lease(worker, ["default"])
    expire(leased)
    Task.objects.reset_expired()


def test_snoozes_do_not_count_toward_max_leases(worker, settings):
    settings.SCYLLA = {"MAX_LEASES": 2}
    task = TaskFactory()
    for _ in range(3):
        [leased] = Task.objects.lease(worker, ["default"])
        leased.snooze(worker, 1)
        Task.objects.filter(pk=task.pk).update(not_before=None)
    time_out(worker)  # the 4th lease, the 1st to time out
    assert Task.objects.get(pk=task.pk).status == Status.READY
    time_out(worker)  # the 2nd to time out: the cap
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.leases, stored.snoozes) == (Status.ABORTED, 5, 3)
    assert stored.errors[0]["code"] == "max_leases_exceeded"


def test_yields_do_not_count_toward_max_leases(worker, settings):
    """A lease given back (a worker shutting down, or tasks prefetched behind a slow one) did
    not time out: `MAX_LEASES` counts only the leases that did."""
    settings.SCYLLA = {"MAX_LEASES": 2}
    task = TaskFactory()
    for _ in range(3):
        [leased] = Task.objects.lease(worker, ["default"])
        leased.yield_lease(worker)
        assert Task.objects.reset_expired() == 1
        assert Task.objects.get(pk=task.pk).status == Status.READY
    time_out(worker)  # the 4th lease, the 1st to time out
    assert Task.objects.get(pk=task.pk).status == Status.READY
    time_out(worker)  # the 2nd to time out: the cap
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.leases) == (Status.ABORTED, 5)
    assert stored.errors[0]["code"] == "max_leases_exceeded"
    assert typs(stored).count(EventType.YIELD) == 3


def test_a_snooze_frees_the_locks_of_the_task(worker, vendor):
    if vendor == "mysql":
        pytest.skip("locks need the key triggers (PostgreSQL, SQLite)")
    first = Task.objects.submit("default", 1, locks=["invoice:7"])
    second = Task.objects.submit("default", 2, locks=["invoice:7"])
    [held] = Task.objects.lease(worker, ["default"], limit=2)
    assert held.pk == first.pk
    assert Task.objects.lease(worker, ["default"]) == []  # the lock is held
    held.snooze(worker, 3600)
    [next_one] = Task.objects.lease(worker, ["default"])
    assert next_one.pk == second.pk


def test_a_snooze_outcome_is_written_by_finish_many_with_the_others(worker):
    snoozing, completing = running_task(worker), running_task(worker)
    written = Task.objects.finish_many(
        worker,
        [
            Outcome(snoozing.pk, snoozing.leases, snooze=timedelta(seconds=30)),
            Outcome(completing.pk, completing.leases, result=1),
        ],
    )
    assert written == {snoozing.pk, completing.pk}
    assert Task.objects.get(pk=snoozing.pk).status == Status.READY
    assert Task.objects.get(pk=completing.pk).status == Status.COMPLETED
    stale = Task.objects.finish_many(
        worker, [Outcome(snoozing.pk, snoozing.leases, snooze=timedelta(seconds=30))]
    )
    assert stale == set()
    assert Task.objects.get(pk=snoozing.pk).snoozes == 1


# -- children ----------------------------------------------------------------------------------


def child(queue: str, spec: object, rn: str, parent: str) -> dict[str, object]:
    return {"queue": queue, "spec": spec, "rn": rn, "parent": parent}


def test_children_are_submitted_with_their_parents_completion(worker):
    parent = running_task(worker)
    children = (child("default", 1, "c-1", parent.rn), child("other", 2, "c-2", parent.rn))
    written = Task.objects.finish_many(
        worker, [Outcome(parent.pk, parent.leases, result="ok", children=children)]
    )
    assert written == {parent.pk}
    made = Task.objects.filter(parent=parent.rn).order_by("rn")
    assert [(t.rn, t.queue, t.spec, t.status) for t in made] == [
        ("c-1", "default", 1, Status.READY),
        ("c-2", "other", 2, Status.READY),
    ]


def test_children_of_an_aborted_parent_are_never_submitted(worker):
    parent = running_task(worker)
    Task.objects.finish_many(
        worker,
        [
            Outcome(
                parent.pk,
                parent.leases,
                errors=[{"code": "failed"}],
                children=(child("default", 1, "c-aborted", parent.rn),),
            )
        ],
    )
    assert Task.objects.get(pk=parent.pk).status == Status.ABORTED
    assert not Task.objects.filter(parent=parent.rn).exists()


def test_children_of_a_refused_completion_are_never_submitted(worker, other_worker):
    parent = running_task(worker)
    expire(parent)
    Task.objects.reset_expired()
    Task.objects.lease(other_worker, ["default"])
    stale = Outcome(
        parent.pk, parent.leases, result=1, children=(child("default", 1, "c-late", parent.rn),)
    )
    assert Task.objects.finish_many(worker, [stale]) == set()
    assert not Task.objects.filter(rn="c-late").exists()


def test_a_child_whose_rn_exists_is_skipped_and_the_parent_completes(worker):
    TaskFactory(rn="c-taken", spec="first", queue="elsewhere")
    parent = running_task(worker)
    Task.objects.finish_many(
        worker,
        [
            Outcome(
                parent.pk,
                parent.leases,
                result=1,
                children=(child("default", "second", "c-taken", parent.rn),),
            )
        ],
    )
    assert Task.objects.get(pk=parent.pk).status == Status.COMPLETED
    assert Task.objects.get(rn="c-taken").spec == "first"


# -- results passed on ---------------------------------------------------------------------------


def test_a_follow_up_reads_its_parents_results_after_its_release(worker, django_assert_num_queries):
    from scylla_django.followups import parent_results

    first, second = TaskFactory(rn="p-1"), TaskFactory(rn="p-2", retry={"max_attempts": 2})
    follow_up = Task.objects.submit("default", "sum", after=["p-1", "p-2"])
    [a, b] = Task.objects.lease(worker, ["default"], limit=2)
    a.complete(worker, result=1)
    retry = b.abort(worker, [{"code": "flaky"}], retry=True)  # the chain's second attempt completes
    assert retry is not None
    Task.objects.filter(pk=retry.pk).update(not_before=None)
    [b2] = Task.objects.lease(worker, ["default"])
    b2.complete(worker, result={"two": 2})
    assert release_followups().released == 1
    follow_up.refresh_from_db()
    assert follow_up.after == ["p-1", "p-2"]
    with django_assert_num_queries(1):
        assert parent_results(follow_up) == {"p-1": 1, "p-2": {"two": 2}}
    assert parent_results(first) == {} and second.after is None


# -- expiry ------------------------------------------------------------------------------------


def test_expires_in_and_expires_at_are_validated_and_nothing_is_written():
    soon = timezone.now() + timedelta(minutes=5)
    cases = [
        ({"expires_at": timezone.now() - timedelta(seconds=1)}, "expires_at"),
        ({"expires_at": soon.replace(tzinfo=None)}, "expires_at"),
        ({"expires_at": "tomorrow"}, "expires_at"),
        ({"expires_in": -3}, "expires_in"),
        ({"expires_in": "never"}, "expires_in"),
        ({"expires_in": 60, "expires_at": soon}, "expires_in"),
        ({"expires_at": soon, "not_before": soon + timedelta(minutes=1)}, "expires_at"),
    ]
    for options, field in cases:
        with pytest.raises(ValidationError) as raised:
            Task.objects.submit("default", 1, **options)
        [error] = raised.value.error_dict[field]
        assert error.code in ("invalid_expires_at", "invalid_expires_in"), options
    assert not Task.objects.exists()


def test_expires_in_sets_expires_at_from_now():
    clock = Stopwatch()
    task = Task.objects.submit("default", 1, expires_in=timedelta(minutes=10))
    stored = Task.objects.get(pk=task.pk)
    assert clock.bounds((stored.expires_at - clock.started).total_seconds(), 600)


def test_a_task_past_its_expiry_is_never_leased(worker):
    TaskFactory(rn="expiring", expires_in=3600)
    TaskFactory(rn="lasting")
    Task.objects.filter(rn="expiring").update(expires_at=Now() - timedelta(microseconds=1))
    assert [t.rn for t in Task.objects.ready()] == ["lasting"]
    leased = Task.objects.lease(worker, ["default"], limit=5)
    assert [t.rn for t in leased] == ["lasting"]
    assert Task.objects.get(rn="expiring").status == Status.READY  # until the monitor's pass


def test_the_monitor_cancels_expired_tasks_with_the_code_expired(worker):
    started = running_task(worker, expires_in=3600)
    task = TaskFactory(expires_in=3600)
    fresh = TaskFactory(expires_in=3600)
    Task.objects.filter(pk__in=[task.pk, started.pk]).update(expires_at=Now())
    assert Monitor().run_once().expired == 1
    stored = Task.objects.get(pk=task.pk)
    assert stored.status == Status.CANCELLED
    assert [e["code"] for e in stored.errors] == ["expired"]
    assert typs(task) == [EventType.CANCELLATION]
    assert Task.objects.get(pk=started.pk).status == Status.RUNNING  # started in time
    assert Task.objects.get(pk=fresh.pk).status == Status.READY


def test_expired_tasks_are_cancelled_once_by_three_monitors():
    for n in range(60):
        Task.objects.submit("default", n, rn=f"e-{n}", expires_in=3600)
    Task.objects.update(expires_at=Now())

    def monitor(barrier):
        service = Monitor(reset_chunk_size=7).expiry  # each thread a monitor of its own
        barrier.wait()
        return service.run("default")["expired"]

    counts = run_in_threads([monitor] * 3)
    assert sum(counts) == 60
    assert Task.objects.filter(status=Status.CANCELLED).count() == 60
    assert History.objects.filter(typ=EventType.CANCELLATION).count() == 60
