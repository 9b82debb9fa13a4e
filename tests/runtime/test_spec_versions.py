"""Safe deploys of handler code: a handler's spec version stamped on its tasks, the spec
migrations that upgrade an older stored spec when the task is leased (fenced on the lease, in
the execution core every runner shares), and `manage.py check --deploy`, which names the
stored tasks a deploy would strand: those of a queue no handler serves any more, and those
whose spec no longer validates against its handler's schema."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from scylla_django import spec_versions
from scylla_django.enums import Status
from scylla_django.exceptions import LeaseLost
from scylla_django.handlers import HandlerRegistry, TaskContext, handler
from scylla_django.models import Task, Worker
from scylla_django.testing import drain, run_task
from scylla_django.worker import TaskWorker, WorkerOptions
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.processes import ROOT, child_env, finish, start, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HANDLERS = "--handlers=tests.versioned_handlers"
QUEUES = ("deploy.invoices", "deploy.removed", "deploy.newer", "deploy.broken")

INVOICE_V2 = {
    "type": "object",
    "required": ["customer", "amount_cents"],
    "properties": {
        "customer": {"type": "string"},
        "amount_cents": {"type": "integer", "minimum": 0},
    },
    "additionalProperties": False,
}


@pytest.fixture(autouse=True)
def forget_spec_versions() -> Iterator[None]:
    yield
    for queue in QUEUES:
        spec_versions.unregister(queue)


def old_code(registry: HandlerRegistry | None = None) -> None:
    """The handler as it was (in the registry of the old code's processes): version 1 (none
    declared), `{"customer", "amount"}` in euros."""
    registry = HandlerRegistry() if registry is None else registry
    spec_versions.unregister("deploy.invoices")

    @handler("deploy.invoices", registry=registry)
    def invoice(ctx: TaskContext) -> dict:
        return {"billed": ctx.spec["amount"]}


def new_code(registry: HandlerRegistry) -> None:
    """The handler after the deploy: version 2 reads cents, and says so in its schema."""

    @handler("deploy.invoices", registry=registry, version=2, schema=INVOICE_V2)
    def invoice(ctx: TaskContext) -> dict:
        return {"billed_cents": ctx.spec["amount_cents"], "version": ctx.task.version}

    @handler.migrates("deploy.invoices", from_version=1)
    def euros_to_cents(spec: dict) -> dict:
        spec = dict(spec)
        spec["amount_cents"] = round(spec.pop("amount") * 100)
        return spec


def deploy_messages(*ids: str) -> list:
    """The messages of `check --deploy` with the given ids."""
    messages = run_checks(include_deployment_checks=True, databases=["default"])
    return [m for m in messages if m.id in ids]


def test_a_submission_is_stamped_with_its_handlers_version():
    registry = HandlerRegistry()
    old_code()
    before = Task.objects.submit("deploy.invoices", {"customer": "acme", "amount": 12.5})
    new_code(registry)
    after = Task.objects.submit("deploy.invoices", {"customer": "acme", "amount_cents": 1250})
    bulk = Task.objects.submit_many([{"queue": "deploy.invoices", "spec": {"amount_cents": 1}}])
    assert Task.objects.get(rn=before.rn).version is None  # read as version 1
    assert Task.objects.get(rn=after.rn).version == 2
    assert Task.objects.get(rn=bulk[0].rn).version == 2


def test_a_migrated_spec_runs_under_the_new_handler_with_run_task():
    registry = HandlerRegistry()
    old_code()
    task = Task.objects.submit("deploy.invoices", {"customer": "acme", "amount": 12.5})
    new_code(registry)

    done = run_task(task.rn, registry=registry)

    assert done.status == Status.COMPLETED
    assert done.result == {"billed_cents": 1250, "version": 2}
    stored = Task.objects.get(rn=task.rn)
    assert (stored.spec, stored.version) == ({"customer": "acme", "amount_cents": 1250}, 2)


def test_a_migrated_spec_runs_under_the_new_handler_in_a_worker():
    registry = HandlerRegistry()
    old_code()
    rns = [
        Task.objects.submit("deploy.invoices", {"customer": c, "amount": 2.0}).rn
        for c in ("a", "b", "c")
    ]
    new_code(registry)

    TaskWorker(
        WorkerOptions(["deploy.invoices"], registry=registry, concurrency=2, max_tasks=3)
    ).run()

    for task in Task.objects.filter(rn__in=rns):
        assert task.status == Status.COMPLETED, task.errors
        assert task.result == {"billed_cents": 200, "version": 2}
        assert task.version == 2


def test_a_migrated_spec_runs_under_an_async_handler_in_a_worker():
    registry = HandlerRegistry()
    old_code()
    task = Task.objects.submit("deploy.invoices", {"customer": "acme", "amount": 1.0})

    @handler("deploy.invoices", registry=registry, version=2, schema=INVOICE_V2)
    async def invoice(ctx: TaskContext) -> dict:
        return {"billed_cents": ctx.spec["amount_cents"]}

    @handler.migrates("deploy.invoices", from_version=1)
    def euros_to_cents(spec: dict) -> dict:
        return {"customer": spec["customer"], "amount_cents": round(spec["amount"] * 100)}

    TaskWorker(WorkerOptions(["deploy.invoices"], registry=registry, max_tasks=1)).run()

    done = Task.objects.get(rn=task.rn)
    assert (done.status, done.result, done.version) == (Status.COMPLETED, {"billed_cents": 100}, 2)


def test_a_spec_newer_than_the_handler_reads_is_given_back_unrun():
    registry = HandlerRegistry()
    spec_versions.register_spec("deploy.newer", 3, None)
    task = Task.objects.submit("deploy.newer", {"n": 1})  # written by a newer web process
    ran = []

    @handler("deploy.newer", registry=registry, version=2)  # an older worker
    def older(ctx: TaskContext) -> None:
        ran.append(ctx.task.rn)

    done = run_task(task.rn, registry=registry)

    assert ran == []
    assert (done.status, done.snoozes, done.attempt, done.version) == (Status.READY, 1, 1, 3)


def test_a_failing_or_missing_migration_aborts_the_task():
    registry = HandlerRegistry()
    spec_versions.register_spec("deploy.broken", 1, None)
    one = Task.objects.submit("deploy.broken", {"n": 1})
    spec_versions.register_spec("deploy.broken", 3, None)
    two = Task.objects.submit("deploy.broken", {"n": 2})
    spec_versions.register_spec("deploy.broken", 1, None)
    zero = Task.objects.submit("deploy.broken", {"n": 0})

    @handler("deploy.broken", registry=registry, version=3)
    def broken(ctx: TaskContext) -> None:
        raise AssertionError("the handler never runs")

    @handler.migrates("deploy.broken", from_version=1)
    def divide(spec: dict) -> dict:
        return {"inverse": 1 / spec["n"]}

    # From 1: the step 2 → 3 is missing; from 0: the migration raises. Version 3 runs.
    for rn in (one.rn, zero.rn):
        done = run_task(rn, registry=registry)
        assert done.status == Status.ABORTED
        [error] = done.errors
        assert error["code"] == "spec_migration_failed"
        assert error["args"] == {"from_version": 1, "to_version": 3}
    assert run_task(two.rn, registry=registry).errors[0]["code"] == "exception"


def test_the_upgraded_spec_is_written_only_under_the_lease():
    old_code()
    task = Task.objects.submit("deploy.invoices", {"customer": "acme", "amount": 1.0})
    worker = Worker.objects.register(queues=["deploy.invoices"])
    [leased] = Task.objects.lease(worker, ["deploy.invoices"])
    Task.objects.filter(pk=leased.pk).update(leases=leased.leases + 1)  # taken over meanwhile

    with pytest.raises(LeaseLost):
        leased.upgrade_spec(worker, {"customer": "acme", "amount_cents": 100}, 2)

    stored = Task.objects.get(rn=task.rn)
    assert (stored.spec, stored.version) == ({"customer": "acme", "amount": 1.0}, None)


def test_check_deploy_names_a_task_whose_handler_was_removed():
    stranded = Task.objects.submit("deploy.removed", {"n": 1})
    Task.objects.submit("t-echo", {"n": 1})  # tests.worker_handlers serves it

    [message] = deploy_messages("scylla_django.W052")

    assert "'deploy.removed'" in message.msg
    assert stranded.rn in message.msg
    assert "1 ready task(s)" in message.msg


def test_check_deploy_names_the_stored_specs_that_no_longer_validate():
    registry = HandlerRegistry()
    old_code()
    fine = Task.objects.submit("deploy.invoices", {"customer": "acme", "amount": 12.5})
    unmigratable = Task.objects.submit("deploy.invoices", {"client": "acme", "amount": 3})
    new_code(registry)
    Task.objects.submit("deploy.invoices", {"customer": "acme", "amount_cents": 5})
    negative = Task.objects.submit("deploy.invoices", {"customer": "x", "amount_cents": -5})

    [message] = deploy_messages("scylla_django.E053")

    assert "'deploy.invoices'" in message.msg
    assert unmigratable.rn in message.msg and "'customer' is a required property" in message.msg
    assert "'client' was unexpected" in message.msg
    assert negative.rn in message.msg and "spec.amount_cents: -5 is less than" in message.msg
    assert fine.rn not in message.msg

    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemCheckError) as failed:
        call_command("check", deploy=True, databases=["default"], stdout=out, stderr=err)
    assert "scylla_django.E053" in str(failed.value)
    assert negative.rn in str(failed.value)


def test_check_deploy_names_specs_no_migration_reaches_and_newer_ones():
    spec_versions.register_spec("deploy.broken", 1, None)
    old = Task.objects.submit("deploy.broken", {"n": 1})
    spec_versions.register_spec("deploy.newer", 4, None)
    newer = Task.objects.submit("deploy.newer", {"n": 1})
    spec_versions.register_spec("deploy.broken", 2, None)
    spec_versions.register_spec("deploy.newer", 3, None)

    unmigrated = deploy_messages("scylla_django.E054")
    ahead = deploy_messages("scylla_django.W055")

    assert [old.rn in m.msg and "'deploy.broken'" in m.msg for m in unmigrated] == [True]
    assert [newer.rn in m.msg for m in ahead] == [True]


def test_bad_schemas_and_unreachable_migrations_are_reported():
    registry = HandlerRegistry()

    @handler("deploy.broken", registry=registry, schema={"type": "no such type"})
    def broken(ctx: TaskContext) -> None: ...

    @handler.migrates("deploy.broken", from_version=1)
    def never(spec: dict) -> dict:
        return spec

    messages = [m for m in run_checks() if m.id in ("scylla_django.E050", "scylla_django.W051")]

    assert [m.id for m in messages] == ["scylla_django.E050", "scylla_django.W051"]
    assert "'deploy.broken'" in messages[0].msg


def test_a_handler_version_and_a_migration_are_checked_when_declared():
    with pytest.raises(TypeError, match="version must be an integer"):
        handler("deploy.broken", version=0)
    with pytest.raises(TypeError, match="from_version must be an integer"):
        handler.migrates("deploy.broken", from_version="1")  # type: ignore[arg-type]

    @handler.migrates("deploy.broken", from_version=1)
    def one(spec: dict) -> dict:
        return spec

    with pytest.raises(ValueError, match="already migrates from version 1"):

        @handler.migrates("deploy.broken", from_version=1)
        def other(spec: dict) -> dict:
            return spec


def test_drain_upgrades_every_task_it_runs():
    registry = HandlerRegistry()
    old_code()
    for amount in (1.0, 2.0):
        Task.objects.submit("deploy.invoices", {"customer": "acme", "amount": amount})
    new_code(registry)

    done = drain(["deploy.invoices"], registry=registry)

    assert sorted(t.result["billed_cents"] for t in done) == [100, 200]


def test_a_bundle_handler_gets_its_members_upgraded_and_a_failed_one_aborted():
    registry = HandlerRegistry()
    spec_versions.register_spec("deploy.broken", None, None)
    good = Task.objects.submit("deploy.broken", {"n": 4})
    bad = Task.objects.submit("deploy.broken", {"n": 0})
    seen = []

    @handler("deploy.broken", registry=registry, version=2, bundle_size=10)
    def inverses(contexts: list[TaskContext]) -> dict:
        seen.extend(ctx.spec for ctx in contexts)
        return {ctx.task.rn: ctx.spec["inverse"] for ctx in contexts}

    @handler.migrates("deploy.broken", from_version=1)
    def invert(spec: dict) -> dict:
        return {"inverse": 1 / spec["n"]}

    drain(["deploy.broken"], registry=registry)

    assert seen == [{"inverse": 0.25}]
    done, failed = Task.objects.get(rn=good.rn), Task.objects.get(rn=bad.rn)
    assert (done.status, done.result, done.version) == (Status.COMPLETED, 0.25, 2)
    assert (failed.status, failed.errors[0]["code"]) == (Status.ABORTED, "spec_migration_failed")
    assert failed.version is None  # nothing upgraded was written


def test_check_deploy_reads_every_database_the_tasks_are_migrated_to():
    stranded = Task.objects.submit("deploy.removed", {"n": 1})
    out, err = io.StringIO(), io.StringIO()
    call_command("check", deploy=True, stdout=out, stderr=err)
    assert "scylla_django.W052" in out.getvalue() + err.getvalue()
    assert stranded.rn in out.getvalue() + err.getvalue()


def test_scylla_run_and_an_isolated_worker_upgrade_the_spec_in_their_processes():
    first = Task.objects.submit("deploy.process", {"weeks": 1})
    second = Task.objects.submit("deploy.process", {"weeks": 2})
    assert spec_versions.declared_version("deploy.process") is None  # yesterday's code

    ran = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "scylla_run", first.rn, HANDLERS],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    worker = start(
        "scylla_worker",
        "--queue=deploy.process",
        "--isolation=process",
        "--max-tasks=1",
        "--poll-interval=0.1",
        HANDLERS,
    )
    try:
        wait_until(
            lambda: Task.objects.filter(rn=second.rn, status=Status.COMPLETED).exists(),
            timeout=120,
            what="the isolated worker ran the task",
        )
    finally:
        code, output = finish(worker, timeout=60)
    assert code == 0, output

    one, two = Task.objects.get(rn=first.rn), Task.objects.get(rn=second.rn)
    assert (one.spec, one.version, one.result["days"]) == ({"days": 7}, 2, 7)
    assert (two.spec, two.version, two.result["days"]) == ({"days": 14}, 2, 14)
    assert two.result["version"] == 2
    assert two.result["pid"] != worker.pid  # the handler ran in the worker's child process
