"""Steps: `ctx.step()` records a step's result with the writes made in it, fenced on the lease;
a later run of the task gets the recorded result instead of running the step again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models.functions import Now

from scylla_django import Fixed, Retry
from scylla_django.enums import Status
from scylla_django.exceptions import LeaseLost
from scylla_django.handlers import HandlerRegistry, TaskContext, handler
from scylla_django.models import Step, Task
from scylla_django.testing import run_task

pytestmark = pytest.mark.django_db(transaction=True)


def made(name: str) -> int:
    """How many rows the side effect `name` wrote (the app's own table counts them)."""
    return User.objects.filter(username=name).count()


def due_now(task: Task) -> None:
    Task.objects.filter(pk=task.pk).update(not_before=Now())


def test_completed_steps_return_their_results_without_running_again():
    registry = HandlerRegistry()
    calls: list[str] = []

    @handler("st-once", registry=registry)
    def three_steps(ctx: TaskContext) -> dict:
        def fetch() -> list[int]:
            calls.append("fetch")
            return [1, 2, 3]

        rows = ctx.step("fetch", fetch)
        with ctx.step("load") as step:
            if not step.done:
                calls.append("load")
                User.objects.create(username="loaded")
                step.result = len(rows)

        @ctx.step("report")
        def report(total: int) -> str:
            calls.append("report")
            return f"{total} rows"

        text = report(step.result)
        if ctx.task.snoozes == 0:
            ctx.snooze(1)  # the run ends here; the next one finds every step done
        return {"text": text, "steps": ctx.steps}

    task = Task.objects.submit("st-once", {})
    first = run_task(task.rn, registry=registry)
    assert first.status == Status.READY
    due_now(first)
    done = run_task(task.rn, registry=registry)
    assert done.status == Status.COMPLETED
    assert calls == ["fetch", "load", "report"]
    assert made("loaded") == 1
    assert done.result == {
        "text": "3 rows",
        "steps": {"fetch": [1, 2, 3], "load": 3, "report": "3 rows"},
    }
    steps = list(Step.objects.filter(task=task).values_list("name", "size", "lease"))
    assert steps == [("fetch", 7, 1), ("load", 1, 1), ("report", 8, 1)]


def test_a_step_left_by_an_exception_records_and_commits_nothing():
    registry = HandlerRegistry()

    @handler("st-raise", registry=registry)
    def failing(ctx: TaskContext) -> None:
        with ctx.step("write") as step:
            User.objects.create(username="half")
            step.result = "never"
            raise RuntimeError("in the middle")

    task = Task.objects.submit("st-raise", {})
    aborted = run_task(task.rn, registry=registry)
    assert aborted.status == Status.ABORTED
    assert made("half") == 0
    assert not Step.objects.filter(task=task).exists()


def test_an_oversized_step_result_is_a_clear_error_and_writes_nothing(settings):
    settings.SCYLLA = {**getattr(settings, "SCYLLA", {}), "SPEC_SIZE_LIMIT": 5000}
    registry = HandlerRegistry()
    caught: list[ValidationError] = []

    @handler("st-big", registry=registry)
    def big(ctx: TaskContext) -> None:
        try:
            with ctx.step("big") as step:
                User.objects.create(username="big")
                step.result = "x" * 6000
        except ValidationError as exc:
            caught.append(exc)
            raise

    task = Task.objects.submit("st-big", {})
    aborted = run_task(task.rn, registry=registry)
    assert aborted.status == Status.ABORTED
    [error] = caught
    assert error.code == "too_large"
    assert "the result of step 'big'" in error.messages[0]
    assert made("big") == 0
    assert not Step.objects.filter(task=task).exists()


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 101, "@cursor", 7])
def test_a_bad_step_name_is_refused(name):
    registry = HandlerRegistry()
    caught: list[ValidationError] = []

    @handler("st-name", registry=registry)
    def named(ctx: TaskContext) -> None:
        try:
            ctx.step(name, lambda: 1)
        except ValidationError as exc:
            caught.append(exc)
            raise

    task = Task.objects.submit("st-name", {})
    assert run_task(task.rn, registry=registry).status == Status.ABORTED
    assert [exc.code for exc in caught] == ["invalid_name"]
    assert not Step.objects.exists()


def test_a_zombie_step_write_is_refused():
    """A run whose lease was reset (the task given to another worker) commits no step."""
    registry = HandlerRegistry()
    raised: list[BaseException] = []

    @handler("st-zombie", registry=registry)
    def zombie(ctx: TaskContext) -> None:
        # The monitor resets the expired lease, another worker leases the task.
        Task.objects.filter(pk=ctx.task.pk).update(
            deadline=Now() - timedelta(seconds=1), updated=Now() - timedelta(seconds=2)
        )
        assert Task.objects.reset_expired() == 1
        Task.objects.filter(pk=ctx.task.pk).update(
            status=Status.RUNNING,
            owner="another",
            leases=ctx.task.leases + 1,
            deadline=Now() + timedelta(minutes=5),
        )
        try:
            with ctx.step("charge") as step:
                User.objects.create(username="charged")
                step.result = "charged"
        except LeaseLost as exc:
            raised.append(exc)
            raise

    task = Task.objects.submit("st-zombie", {})
    run_task(task.rn, registry=registry)
    assert [exc.code for exc in raised] == ["lease_lost"]
    assert made("charged") == 0
    assert not Step.objects.filter(task=task).exists()


@pytest.mark.parametrize("resume", [True, False])
def test_a_retry_resumes_or_starts_over_as_its_policy_says(resume):
    registry = HandlerRegistry()
    ran: list[str] = []

    @handler(
        "st-retry", registry=registry, retry=Retry(max_attempts=2, backoff=Fixed(0), resume=resume)
    )
    def flaky(ctx: TaskContext) -> dict:
        ctx.step("first", lambda: ran.append(f"first {ctx.task.attempt}") or ctx.task.attempt)
        if ctx.task.attempt == 1:
            raise RuntimeError("the second step fails once")
        return ctx.steps

    task = Task.objects.submit("st-retry", {})
    assert run_task(task.rn, registry=registry).status == Status.ABORTED
    retry = Task.objects.get(retry_of=task.rn)
    done = run_task(retry.rn, registry=registry)
    assert done.status == Status.COMPLETED
    if resume:
        assert ran == ["first 1"]
        assert done.result == {"first": 1}
    else:
        assert ran == ["first 1", "first 2"]
        assert done.result == {"first": 2}


def test_a_cursor_is_taken_up_where_the_last_checkpoint_left_it():
    registry = HandlerRegistry()
    seen: list[int] = []

    @handler("st-cursor", registry=registry)
    def loop(ctx: TaskContext) -> int:
        start = ctx.cursor or 0
        for row in range(start, 10):
            seen.append(row)
            if row % 3 == 2:
                ctx.checkpoint(row + 1)
            if row == 7 and ctx.task.snoozes == 0:
                ctx.snooze(1)
        return len(seen)

    task = Task.objects.submit("st-cursor", {})
    due_now(run_task(task.rn, registry=registry))
    done = run_task(task.rn, registry=registry)
    assert done.status == Status.COMPLETED
    # Checkpointed at 9 after rows 0..8 would be; the snooze came at 7, after the one at 6.
    assert seen == [0, 1, 2, 3, 4, 5, 6, 7, 6, 7, 8, 9]
    assert done.result == 12
    assert Step.objects.get(task=task, name="@cursor").result == 9


def test_purging_a_task_deletes_its_steps_waits_and_signals():
    from scylla_django.models import TaskSignal, Wait

    registry = HandlerRegistry()

    @handler("st-purge", registry=registry)
    def stepped(ctx: TaskContext) -> None:
        ctx.step("one", lambda: 1)
        ctx.checkpoint(5)
        ctx.wait_for(signal="go")

    task = Task.objects.submit("st-purge", {})
    kept = Task.objects.submit("st-purge", {})
    run_task(task.rn, registry=registry)
    run_task(kept.rn, registry=registry)
    task.signal("go", 1)
    kept.signal("go", 2)
    assert Task.objects.filter(pk=task.pk).delete()[0] == 1
    for side in (Step, Wait, TaskSignal):
        assert not side.objects.filter(task_id=task.pk).exists()
        assert side.objects.filter(task_id=kept.pk).exists()
