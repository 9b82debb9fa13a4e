"""Bundle handlers: their declaration, the per-member decisions, and a worker run in-process."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from scylla_django import Abort
from scylla_django.enums import Status
from scylla_django.handlers import Bundling, HandlerRegistry, TaskContext, handler
from scylla_django.models import Task, Worker
from scylla_django.worker import TaskWorker, WorkerOptions
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_bundle_handler_declares_its_size_and_wait():
    registry = HandlerRegistry()
    handler("clean", registry=registry, bundle_size=100, bundle_wait=timedelta(seconds=1))(
        lambda bundle: None
    )
    assert registry.bundling_of("clean") == Bundling(100, timedelta(seconds=1))
    handler("plain", registry=registry)(lambda ctx: None)
    assert registry.bundling_of("plain") is None
    handler("nowait", registry=registry, bundle_size=3)(lambda bundle: None)
    assert registry.bundling_of("nowait") == Bundling(3, timedelta(0))


@pytest.mark.parametrize(
    ("size", "wait", "code"),
    [
        (0, None, "invalid_bundle_size"),
        (1001, None, "invalid_bundle_size"),
        ("10", None, "invalid_bundle_size"),
        (True, None, "invalid_bundle_size"),
        (None, 1, "invalid_bundle_size"),
        (10, -1, "invalid_bundle_wait"),
        (10, "soon", "invalid_bundle_wait"),
    ],
)
def test_a_bad_bundle_size_or_wait_is_refused(size, wait, code):
    with pytest.raises(ValidationError) as caught:
        handler("q", registry=HandlerRegistry(), bundle_size=size, bundle_wait=wait)
    assert caught.value.code == code


def test_complete_and_abort_decide_a_bundle_member_once():
    worker = Worker.objects.register(["t-bundle"])
    task = Task.objects.submit("t-bundle", {})
    ctx = TaskContext(task, worker)
    with pytest.raises(RuntimeError, match="plain handler"):
        ctx.complete(1)
    ctx.bundled = True
    ctx.abort(Abort("bad", "no"))
    assert ctx.decision == (None, [{"code": "bad", "args": {}, "description": "no"}])
    with pytest.raises(RuntimeError, match="decided already"):
        ctx.complete(1)
    with pytest.raises(TypeError):
        TaskContext(task, worker).abort("not an exception")  # type: ignore[arg-type]


def test_a_worker_run_once_runs_one_bundle_and_leaves_the_rest():
    for n in range(7):
        Task.objects.submit("t-bundle", {"n": n})
    TaskWorker(WorkerOptions(["t-bundle"], poll_interval=0.05)).run(once=True)
    assert Task.objects.filter(status=Status.COMPLETED).count() == 5
    assert Task.objects.filter(status=Status.READY).count() == 2
