"""A handler's snooze policy: `@handler(queue, snooze=Exponential(...) | Fixed(...))` sets
how long a snooze without a delay (`raise Snooze()`, `ctx.snooze()`) waits, by the task's
snooze count; without one, such a snooze aborts the task with `invalid_delay`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db.models.functions import Now

from scylla_django import Exponential, Fixed, Snooze, handler
from scylla_django.enums import Status
from scylla_django.handlers import HandlerRegistry
from scylla_django.models import History, Task
from scylla_django.testing import run_task
from scylla_django.worker import TaskWorker, WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)


def snoozer(registry: HandlerRegistry, queue: str, **options: object) -> None:
    """A handler that snoozes without a delay until it has snoozed `spec["times"]` times,
    by `raise Snooze()` or `ctx.snooze()` as `spec["raise"]` says."""

    @handler(queue, registry=registry, **options)
    def snooze(ctx):
        if ctx.task.snoozes < ctx.spec["times"]:
            if ctx.spec.get("raise", True):
                raise Snooze()
            ctx.snooze()
        return {"snoozes": ctx.task.snoozes}


def waits(rn: str, registry: HandlerRegistry, runs: int) -> list[timedelta]:
    """Run `rn` `runs` times, making it due after each snooze; the wait each snooze set."""
    found = []
    for n in range(1, runs + 1):
        task = run_task(rn, registry=registry)
        assert (task.status, task.snoozes, task.attempt) == (Status.READY, n, 1)
        found.append(task.not_before - task.updated)
        Task.objects.filter(pk=task.pk).update(not_before=Now())
    return found


@pytest.mark.parametrize("raised", [True, False], ids=["raise Snooze()", "ctx.snooze()"])
def test_the_nth_snooze_waits_what_the_exponential_policy_says(raised):
    registry = HandlerRegistry()
    snoozer(registry, "sb-exp", snooze=Exponential(initial=5, base=3, cap=100))
    Task.objects.submit("sb-exp", {"times": 5, "raise": raised}, rn="exp")
    seconds = [wait.total_seconds() for wait in waits("exp", registry, 5)]
    assert seconds == [5, 15, 45, 100, 100]
    done = run_task("exp", registry=registry)
    assert (done.status, done.result) == (Status.COMPLETED, {"snoozes": 5})
    assert History.objects.filter(task=done, typ="TaskSnooze").count() == 5


def test_a_fixed_policy_waits_the_same_each_time():
    registry = HandlerRegistry()
    snoozer(registry, "sb-fixed", snooze=Fixed(30))
    Task.objects.submit("sb-fixed", {"times": 3}, rn="fixed")
    assert waits("fixed", registry, 3) == [timedelta(seconds=30)] * 3


def test_a_delay_given_wins_over_the_policy():
    registry = HandlerRegistry()

    @handler("sb-given", registry=registry, snooze=Fixed(42))
    def given(ctx):
        raise Snooze(7)

    Task.objects.submit("sb-given", {}, rn="given")
    task = run_task("given", registry=registry)
    assert task.not_before - task.updated == timedelta(seconds=7)


@pytest.mark.parametrize("raised", [True, False], ids=["raise Snooze()", "ctx.snooze()"])
def test_a_snooze_without_a_delay_or_a_policy_aborts_the_task(raised):
    registry = HandlerRegistry()
    snoozer(registry, "sb-none")
    Task.objects.submit("sb-none", {"times": 1, "raise": raised}, rn="none")
    task = run_task("none", registry=registry)
    assert (task.status, task.snoozes) == (Status.ABORTED, 0)
    [error] = task.errors
    assert error["code"] == "invalid_delay"
    assert "needs a snooze policy on the handler of queue 'sb-none'" in error["description"]


def test_the_worker_follows_the_policy_and_max_snoozes_still_holds(settings):
    settings.SCYLLA = {"MAX_SNOOZES": 2}
    registry = HandlerRegistry()
    snoozer(registry, "sb-worker", snooze=Exponential(initial=2, base=2, cap=600))
    task = Task.objects.submit("sb-worker", {"times": 10})
    found = []
    for _ in range(2):
        TaskWorker(WorkerOptions(["sb-worker"], registry=registry, poll_interval=0.05)).run(
            once=True
        )
        stored = Task.objects.get(pk=task.pk)
        assert stored.status == Status.READY
        found.append(stored.not_before - stored.updated)
        Task.objects.filter(pk=task.pk).update(not_before=Now())
    assert found == [timedelta(seconds=2), timedelta(seconds=4)]
    TaskWorker(WorkerOptions(["sb-worker"], registry=registry, poll_interval=0.05)).run(once=True)
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.errors[0]["code"]) == (Status.ABORTED, "too_many_snoozes")


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        (Fixed(0), ValidationError),
        (Exponential(initial=0), ValidationError),
        (Exponential(cap=0), ValidationError),
        (30, TypeError),
        ("5m", TypeError),
    ],
)
def test_a_policy_that_cannot_give_a_delay_is_refused_where_it_is_written(policy, problem):
    with pytest.raises(problem) as raised:
        handler("sb-bad", registry=HandlerRegistry(), snooze=policy)
    if problem is ValidationError:
        assert raised.value.code == "invalid_delay"


def test_a_snooze_without_a_delay_leaves_it_to_the_policy():
    assert Snooze().delay is None
    assert Snooze(30).delay == timedelta(seconds=30)
