"""Lease reservations and what a crash costs (docs/howto/crashes.md): a worker's lease is a
reservation until its handler's start is known; the heartbeat reports the start at no
statement of its own; a reset of a lease whose handler never started does not count toward
`MAX_LEASES`; a task whose earlier lease expired unstarted is counted from its first run, so a
poison pill still ends after `MAX_LEASES` runs of its own."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from tests.factories import TaskFactory
from tests.helpers import expire

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=30)
RESERVATION = timedelta(seconds=4)


def reserve(worker, *, limit: int = 1) -> list[Task]:
    """Lease as a worker does: a reservation until the handler's start is known."""
    return Task.objects.lease(
        worker, ["default"], limit=limit, lease_length=LEASE, reservation=RESERVATION
    )


def reload(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


def beat(worker, task: Task, *, started: bool) -> set[int]:
    """The worker's heartbeat of `task`, reporting its handler's start or not."""
    return Task.objects.heartbeat_many(
        worker,
        {task.pk: (task.leases, None)},
        lease_length=LEASE,
        started={task.pk} if started else (),
        reservation=RESERVATION,
    )


def typs(task: Task) -> list[str]:
    return list(History.objects.filter(task=task).order_by("id").values_list("typ", flat=True))


def test_a_reserved_lease_lasts_a_reservation_and_is_not_started(worker):
    TaskFactory()
    [task] = reserve(worker)
    stored = reload(task)
    assert stored.status == Status.RUNNING and not stored.handler_started
    assert stored.deadline - stored.updated == RESERVATION
    assert stored.lease_length == LEASE  # what a heartbeat given no length extends by


def test_a_lease_without_a_reservation_is_started_from_the_first(worker):
    """An HTTP worker's lease, or any caller's that reports no starts: counted as before."""
    TaskFactory()
    [task] = Task.objects.lease(worker, ["default"], lease_length=LEASE)
    stored = reload(task)
    assert stored.handler_started and stored.deadline - stored.updated == LEASE


def test_the_heartbeat_carries_the_start_in_its_one_statement(worker):
    """A heartbeat that names a task whose handler has started makes its reservation a full
    lease and marks it started; the others stay reservations; one statement for them all
    (on PostgreSQL; the portable path writes them in one UPDATE too)."""
    TaskFactory.create_batch(3)
    running, waiting, gone = reserve(worker, limit=3)
    expire(gone)
    Task.objects.reset_expired()
    leases = {t.pk: (t.leases, None) for t in (running, waiting, gone)}
    with CaptureQueriesContext(connection) as queries:
        extended = Task.objects.heartbeat_many(
            worker, leases, lease_length=LEASE, started={running.pk}, reservation=RESERVATION
        )
    assert extended == {running.pk, waiting.pk}
    if connection.vendor == "postgresql":
        assert len(queries.captured_queries) == 1
    started, reserved = reload(running), reload(waiting)
    assert started.handler_started and started.deadline - started.updated == LEASE
    assert not reserved.handler_started
    assert reserved.deadline - reserved.updated == RESERVATION
    # Once started, a heartbeat that does not name it again keeps it a full lease.
    beat(worker, started, started=False)
    again = reload(running)
    assert again.handler_started and again.deadline - again.updated == LEASE


def test_a_reservation_that_expires_unstarted_does_not_count_toward_max_leases(worker, settings):
    """The innocent task of a crash: leased beside a poison pill and stranded, lease after
    lease, it is made ready again each time and never aborted."""
    settings.SCYLLA = {"MAX_LEASES": 1}
    task = TaskFactory()
    for lease in (1, 2, 3, 4):
        [leased] = reserve(worker)
        assert leased.leases == lease
        expire(leased)
        assert Task.objects.reset_expired() == 1
        stored = reload(task)
        assert stored.status == Status.READY and stored.unstarted == lease
    assert typs(task) == [EventType.ASSIGNMENT, EventType.TIMEOUT] * 4
    # It runs at last: its start recorded and its outcome written, it completes.
    [leased] = reserve(worker)
    beat(worker, leased, started=True)
    leased.complete(worker)
    assert reload(task).status == Status.COMPLETED


def test_a_started_lease_that_expires_counts(worker, settings):
    settings.SCYLLA = {"MAX_LEASES": 1}
    task = TaskFactory()
    [leased] = reserve(worker)
    assert beat(worker, leased, started=True) == {leased.pk}
    expire(leased)
    assert Task.objects.reset_expired() == 1
    stored = reload(task)
    assert stored.status == Status.ABORTED and stored.unstarted == 0
    assert stored.errors[0]["code"] == "max_leases_exceeded"


def test_a_pill_that_kills_its_worker_before_any_heartbeat_ends_after_max_leases_runs(
    worker, settings
):
    """A handler that kills its worker at once is never reported by a heartbeat. Its first
    lease expires unstarted (not told from a task stranded beside it); from then on the
    worker records its start before its handler runs (the lease shows `unstarted > 0`), each
    later lease counts, and the first one counts too once it has: three runs, then the abort.
    A task stranded beside it each time is never counted."""
    settings.SCYLLA = {"MAX_LEASES": 3}
    pill = TaskFactory(priority=9)
    innocent = TaskFactory(priority=9)
    for run in (1, 2, 3):
        leased = {t.pk: t for t in reserve(worker, limit=2)}
        assert set(leased) == {pill.pk, innocent.pk}
        runs = leased[pill.pk]
        # The worker records the start of a task whose earlier lease expired unstarted
        # before its handler runs; a first lease's start waits for a heartbeat that the
        # crash never lets come.
        assert (runs.unstarted > 0) == (run > 1)
        if runs.unstarted > 0:
            assert beat(worker, runs, started=True) == {runs.pk}
        for task in leased.values():
            expire(task)
        assert Task.objects.reset_expired() == 2
    stored = reload(pill)
    assert stored.status == Status.ABORTED and stored.leases == 3
    assert stored.errors[0]["args"] == {"max_leases": 3}
    assert reload(innocent).status == Status.READY and reload(innocent).unstarted == 3


def test_a_pill_reported_started_by_its_heartbeat_counts_every_run(worker, settings):
    """A handler that kills its worker after a heartbeat reported its start: every lease
    counts, none expires unstarted."""
    settings.SCYLLA = {"MAX_LEASES": 2}
    pill = TaskFactory()
    for _ in (1, 2):
        [leased] = reserve(worker)
        beat(worker, leased, started=True)
        expire(leased)
        Task.objects.reset_expired()
    stored = reload(pill)
    assert stored.status == Status.ABORTED and stored.unstarted == 0


def test_a_reservation_given_back_is_a_yield_not_an_unstarted_lease(worker, settings):
    settings.SCYLLA = {"MAX_LEASES": 1}
    task = TaskFactory()
    [leased] = reserve(worker)
    leased.yield_lease(worker)
    assert Task.objects.reset_expired() == 1
    stored = reload(task)
    assert stored.status == Status.READY and stored.unstarted == 0
    assert typs(task) == [EventType.ASSIGNMENT, EventType.YIELD]


def test_a_reservation_still_ends_at_the_run_time_limit(worker):
    """A reservation is capped by `timeout_at` as a lease is: the monitor aborts with
    `timeout` a lease that expired there, started or not (a worker frozen as its handler
    started, before any heartbeat, holds the task no longer than its limit)."""
    TaskFactory(timeout=1)
    [task] = Task.objects.lease(
        worker,
        ["default"],
        lease_length=LEASE,
        reservation=RESERVATION,
        timeout_grace=timedelta(seconds=1),
    )
    stored = reload(task)
    assert stored.deadline == stored.timeout_at and not stored.handler_started
    Task.objects.filter(pk=task.pk).update(
        deadline=stored.deadline - timedelta(seconds=5),
        timeout_at=stored.deadline - timedelta(seconds=5),
        updated=stored.updated - timedelta(seconds=6),
    )
    assert Task.objects.reset_expired() == 1
    assert reload(task).errors[0]["code"] == "timeout"


def test_a_heartbeat_of_a_lost_reservation_is_refused(worker, other_worker):
    TaskFactory()
    [task] = reserve(worker)
    expire(task)
    Task.objects.reset_expired()
    [again] = reserve(other_worker)
    assert beat(worker, task, started=True) == set()
    assert not reload(again).handler_started  # the other lease is untouched
