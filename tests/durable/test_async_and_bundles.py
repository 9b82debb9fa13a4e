"""Durable execution in `async def` handlers (the `a` forms: `astep`, `acheckpoint`,
`acursor`, `await_for`, `adurable_sleep`; the plain forms are refused with a clear error on the
event loop) and in bundle handlers (steps and checkpoints per member; a wait is refused, as
a member cannot park alone)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from scylla_django.enums import Status
from scylla_django.handlers import HandlerRegistry, TaskContext, handler
from scylla_django.models import Step, Task, Wait
from scylla_django.worker import TaskWorker, WorkerOptions
from tests.helpers import start_worker, stop_worker
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def running(queue: str, registry: HandlerRegistry) -> Iterator[TaskWorker]:
    worker = TaskWorker(
        WorkerOptions(
            [queue],
            registry=registry,
            poll_interval=0.05,
            heartbeat_interval=0.2,
            lease_length=timedelta(minutes=10),
        )
    )
    thread = start_worker(worker)
    try:
        yield worker
    finally:
        stop_worker(worker, thread)


def made(name: str) -> int:
    return User.objects.filter(first_name=name).count()


def make_user(name: str) -> str:
    User.objects.create(username=uuid.uuid4().hex, first_name=name)
    return name


def test_an_async_handler_takes_steps_checkpoints_and_waits_with_the_a_forms():
    registry = HandlerRegistry()
    runs: list[int] = []

    @handler("ad-async", registry=registry)
    async def flow(ctx: TaskContext) -> dict:
        runs.append(ctx.task.leases)
        written = await ctx.astep("write", make_user, "async-step")  # its write in the step

        async def fetch() -> dict:
            return {"fetched": True}

        fetched = await ctx.astep("fetch", fetch)
        start = await ctx.acursor() or 0
        for row in range(start, 5):
            await ctx.acheckpoint(row + 1)
        approval = await ctx.await_for(signal="approved", timeout="1h")
        return {
            "written": written,
            "fetched": fetched,
            "cursor": await ctx.acursor(),
            "approval": approval,
            "steps": sorted(await ctx.asteps()),
        }

    with running("ad-async", registry) as worker:
        task = Task.objects.submit("ad-async", {})
        wait_until(
            lambda: Task.objects.filter(pk=task.pk, status=Status.READY, snoozes=1).exists(),
            what="the task parked",
        )
        parked = Task.objects.get(pk=task.pk)
        assert (parked.status, parked.owner) == (Status.READY, None)
        assert Wait.objects.get(task=task).signal == "approved"
        assert Step.objects.get(task=task, name="@cursor").result == 5
        parked.signal("approved", {"by": "ann"})
        assert worker.hooks.wait_for("written", 1), worker.hooks
    done = Task.objects.get(pk=task.pk)
    assert done.status == Status.COMPLETED, done.errors
    assert done.result == {
        "written": "async-step",
        "fetched": {"fetched": True},
        "cursor": 5,
        "approval": {"by": "ann"},
        "steps": ["fetch", "write"],
    }
    assert made("async-step") == 1
    assert runs == [1, 2]


@pytest.mark.parametrize(
    ("call", "instead"),
    [
        (lambda ctx: ctx.step("s", lambda: 1), "astep"),
        (lambda ctx: ctx.checkpoint(1), "acheckpoint"),
        (lambda ctx: ctx.cursor, "acursor"),
        (lambda ctx: ctx.wait_for(signal="go"), "await_for"),
        (lambda ctx: ctx.durable_sleep(1), "adurable_sleep"),
    ],
)
def test_an_async_handler_calling_a_plain_form_is_told_which_to_await(call, instead):
    registry = HandlerRegistry()

    @handler("ad-plain", registry=registry)
    async def wrong(ctx: TaskContext) -> object:
        return call(ctx)

    with running("ad-plain", registry) as worker:
        task = Task.objects.submit("ad-plain", {})
        assert worker.hooks.wait_for("written", 1), worker.hooks
    aborted = Task.objects.get(pk=task.pk)
    assert aborted.status == Status.ABORTED
    [error] = aborted.errors
    assert f"await ctx.{instead}" in error["description"], error
    assert not Step.objects.exists() and not Wait.objects.exists()


def test_bundle_members_take_steps_and_checkpoints_of_their_own():
    registry = HandlerRegistry()

    @handler("ad-bundle", registry=registry, bundle_size=3, bundle_wait=timedelta(seconds=1))
    def bundle(contexts: list[TaskContext]) -> dict:
        for ctx in contexts:
            ctx.step("write", make_user, f"member-{ctx.spec['n']}")
            ctx.checkpoint(ctx.spec["n"] * 10)
        return {ctx.task.rn: ctx.steps for ctx in contexts}

    with running("ad-bundle", registry) as worker:
        tasks = [Task.objects.submit("ad-bundle", {"n": n}) for n in range(3)]
        assert worker.hooks.wait_for("written", 3), worker.hooks
    for task in tasks:
        done = Task.objects.get(pk=task.pk)
        n = done.spec["n"]
        assert done.status == Status.COMPLETED, done.errors
        assert done.result == {"write": f"member-{n}"}
        assert Step.objects.get(task=task, name="@cursor").result == n * 10
        assert made(f"member-{n}") == 1


def test_a_bundle_member_cannot_park_alone_and_is_told_so():
    registry = HandlerRegistry()

    @handler("ad-bundle-wait", registry=registry, bundle_size=2)
    def bundle(contexts: list[TaskContext]) -> None:
        for ctx in contexts:
            ctx.wait_for(signal="go")

    with running("ad-bundle-wait", registry) as worker:
        task = Task.objects.submit("ad-bundle-wait", {})
        assert worker.hooks.wait_for("written", 1), worker.hooks
    aborted = Task.objects.get(pk=task.pk)
    assert aborted.status == Status.ABORTED
    [error] = aborted.errors
    assert "bundle" in error["description"] and "plain handler" in error["description"], error
    assert not Wait.objects.exists()
