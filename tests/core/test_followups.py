"""Follow-up tasks: held until every parent completed, released once, cancelled if one failed."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from scylla_django import Fixed, Retry, followups
from scylla_django.enums import EventType, Status
from scylla_django.exceptions import TaskNotFound, exception_error
from scylla_django.followups import FollowUpPass, release_followups
from scylla_django.models import AFTER_PARENTS, Dependency, History, Task, Worker
from scylla_django.monitor import Monitor
from tests.helpers import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def finish(worker: Worker, rn: str, ok: bool = True) -> Task | None:
    task = Task.objects.get(rn=rn)
    [leased] = Task.objects.filter(pk=task.pk).lease(worker, [task.queue]) or [None]
    assert leased is not None and leased.pk == task.pk
    if ok:
        leased.complete(worker)
        return None
    return leased.abort(worker, [exception_error(ValueError("broken"))])


@pytest.fixture
def parents(db):
    Task.objects.submit("p", {}, rn="a")
    Task.objects.submit("p", {}, rn="b")
    return ["a", "b"]


def test_a_follow_up_is_held_until_every_parent_completed(parents, worker):
    child = Task.objects.submit("c", {"x": 1}, rn="child", after=parents)
    assert (child.status, child.not_before) == (Status.READY, AFTER_PARENTS)
    assert Task.objects.lease(worker, ["c"]) == []
    finish(worker, "a")
    assert release_followups() == FollowUpPass(0, 0)
    assert Task.objects.lease(worker, ["c"]) == []
    finish(worker, "b")
    assert release_followups() == FollowUpPass(1, 0)
    assert release_followups() == FollowUpPass(0, 0)
    [leased] = Task.objects.lease(worker, ["c"])
    assert leased.rn == "child"
    assert not Dependency.objects.exists()


def test_a_failed_parent_cancels_the_follow_up_naming_it(parents, worker):
    Task.objects.submit("c", {}, rn="child", after=parents)
    finish(worker, "a")
    finish(worker, "b", ok=False)
    assert release_followups() == FollowUpPass(0, 1)
    child = Task.objects.get(rn="child")
    assert child.status == Status.CANCELLED
    assert child.errors == [
        {
            "code": "parent_failed",
            "args": {"parent": "b", "status": "aborted"},
            "description": "Parent task b was aborted; this follow-up will not run.",
        }
    ]
    assert list(History.objects.filter(task=child).values_list("typ", flat=True)) == [
        EventType.CANCELLATION
    ]


def test_a_cancelled_or_purged_parent_fails_the_follow_up(parents):
    Task.objects.submit("c", {}, rn="c1", after=["a"])
    Task.objects.submit("c", {}, rn="c2", after=["b"])
    Task.objects.get(rn="a").cancel()
    Task.objects.filter(rn="b").delete()
    assert release_followups() == FollowUpPass(0, 2)
    errors = dict(Task.objects.filter(rn__in=["c1", "c2"]).values_list("rn", "errors"))
    assert errors["c1"][0]["args"] == {"parent": "a", "status": "cancelled"}
    assert errors["c2"][0]["args"] == {"parent": "b", "status": "purged"}


def test_a_retried_parent_hands_its_follow_ups_to_the_retry(worker):
    Task.objects.submit("p", {}, rn="flaky", retry=Retry(backoff=Fixed(0)))
    Task.objects.submit("c", {}, rn="child", after=["flaky"])
    successor = finish(worker, "flaky", ok=False)
    assert successor is not None
    assert release_followups() == FollowUpPass(0, 0)  # waits for the retry, not cancelled
    finish(worker, successor.rn)
    assert release_followups() == FollowUpPass(1, 0)


def test_a_follow_up_cancelled_by_hand_leaves_no_rows(parents):
    Task.objects.submit("c", {}, rn="child", after=parents).cancel()
    assert release_followups() == FollowUpPass(0, 0)
    assert not Dependency.objects.exists()


def test_the_rows_of_follow_ups_cancelled_by_hand_are_deleted_in_turns(parents, monkeypatch):
    monkeypatch.setattr(followups, "ORPHANS_AT_ONCE", 2)
    for n in range(5):
        Task.objects.submit("c", {}, rn=f"child-{n}", after=parents).cancel()
    kept = Task.objects.submit("c", {}, rn="kept", after=parents)
    assert release_followups() == FollowUpPass(0, 0)
    assert set(Dependency.objects.values_list("child_id", flat=True)) == {kept.pk}


def test_follow_ups_chain(worker):
    Task.objects.submit("p", {}, rn="one")
    Task.objects.submit("p", {}, rn="two", after=["one"])
    Task.objects.submit("p", {}, rn="three", after=["two"])
    finish(worker, "one")
    assert release_followups() == FollowUpPass(1, 0)
    finish(worker, "two")
    assert release_followups() == FollowUpPass(1, 0)


@pytest.mark.parametrize(
    ("after", "code"),
    [
        ([], "invalid_after"),
        ("a", "invalid_after"),
        (["bad rn"], "invalid_rn"),
    ],
)
def test_bad_parents_are_refused(parents, after, code):
    with pytest.raises(ValidationError) as exc:
        Task.objects.submit("c", {}, after=after)
    assert exc.value.error_dict["after"][0].code == code
    assert not Task.objects.filter(queue="c").exists()


def test_an_unknown_parent_is_not_found(parents):
    with pytest.raises(TaskNotFound) as exc:
        Task.objects.submit("c", {}, after=["a", "nope"])
    assert exc.value.rn == "nope"
    assert not Task.objects.filter(queue="c").exists()


def test_a_follow_up_may_also_wait_for_a_time(parents, worker):
    later = datetime(2030, 1, 1, tzinfo=UTC)
    Task.objects.submit("c", {}, rn="child", after=parents, not_before=later)
    finish(worker, "a")
    finish(worker, "b")
    assert release_followups() == FollowUpPass(1, 0)
    assert Task.objects.get(rn="child").not_before == later


def test_the_monitor_releases_follow_ups(parents, worker):
    Task.objects.submit("c", {}, rn="child", after=parents)
    finish(worker, "a")
    finish(worker, "b")
    result = Monitor().run_once()
    assert (result.released, result.cancelled) == (1, 0)


@pytest.mark.concurrency
def test_a_fan_in_of_10000_parents_releases_once(worker):
    # 2,000 on SQLite and MariaDB, whose writers take turns: the same statements, a fifth of
    # the rows.
    count = 10_000 if connection.vendor == "postgresql" else 2_000
    last = f"p-{count - 1}"
    outcomes = Task.objects.submit_many(
        {"queue": "p", "spec": {}, "rn": f"p-{n}"} for n in range(count)
    )
    assert {o.outcome for o in outcomes} == {"inserted"}
    Task.objects.submit("c", {}, rn="fan-in", after=[f"p-{n}" for n in range(count)])
    assert Dependency.objects.count() == count
    # Complete all but one parent (through the real transitions would take minutes here).
    Task.objects.filter(queue="p").exclude(rn=last).update(status=Status.COMPLETED)
    assert release_followups() == FollowUpPass(0, 0)
    Task.objects.filter(rn=last).update(status=Status.COMPLETED)

    passes = run_in_threads([lambda _: release_followups()] * 3)

    assert sum(p.released for p in passes) == 1
    assert Task.objects.get(rn="fan-in").not_before is None
    assert not Dependency.objects.exists()


@pytest.mark.concurrency
def test_a_pass_deleting_orphan_rows_takes_no_lock_a_release_in_progress_holds(parents):
    """One pass releases a follow-up (its task row locked and updated, its rows about to be
    deleted) while another deletes the rows of a follow-up cancelled by hand. On MariaDB a
    DELETE over the whole table locked the releasing pass's rows as it read them and waited
    for its task row: the two passes deadlocked."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite's writers take turns: the delete waits for the release's commit")
    child = Task.objects.submit("c", {}, rn="child", after=parents)
    Task.objects.submit("c", {}, rn="gone", after=parents).cancel()
    Task.objects.filter(rn__in=parents).update(status=Status.COMPLETED)
    cleaned = threading.Event()

    def release(barrier: threading.Barrier) -> bool:
        # The statements of `release_followups()` for `child`, held open.
        with transaction.atomic():
            held = Task.objects.select_for_update(skip_locked=True).filter(pk=child.pk)
            assert list(held.values_list("pk", flat=True)) == [child.pk]
            Task.objects.filter(pk=child.pk).update(not_before=None)
            barrier.wait()
            # Only a failure waits this long: the other pass finishes at once.
            done_meanwhile = cleaned.wait(60)
            Dependency.objects.filter(child_id=child.pk).delete()
        return done_meanwhile

    def clean(barrier: threading.Barrier) -> None:
        barrier.wait()
        followups._delete_orphans("default")
        cleaned.set()

    done_meanwhile, _ = run_in_threads([release, clean])

    assert done_meanwhile, "the orphans' delete waited for the release's locks"
    assert not Dependency.objects.exists()
