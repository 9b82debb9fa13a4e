"""Retries: a retry is a new task, submitted in the abort's transaction, exactly once."""

from __future__ import annotations

import random
import re
import smtplib
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from scylla_django import Abort, Exponential, Fixed, Retry, db, handler
from scylla_django.enums import Status
from scylla_django.exceptions import (
    DuplicateTask,
    InvalidTransition,
    LeaseLost,
    TaskTimedOut,
    exception_error,
)
from scylla_django.handlers import HandlerRegistry
from scylla_django.models import Outcome, Task, Worker
from scylla_django.retries import (
    CRASH_CODES,
    TIMEOUT_CODES,
    queue_policy,
    register_policy,
    successor_rn,
)
from scylla_django.worker import TaskWorker, WorkerOptions
from tests.docs import page
from tests.helpers import expire, run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def leased(worker: Worker, queue: str = "default") -> Task:
    [task] = Task.objects.lease(worker, [queue], lease_length=60)
    return task


class Flaky(smtplib.SMTPException):
    """A subclass, to prove that `on` matches subclasses."""


# -- policies -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_jittered_exponential_backoff_stays_within_its_bounds(seed):
    policy = Retry(max_attempts=20, backoff=Exponential(base=2, initial=3, cap=600), jitter=True)
    rng = random.Random(seed)
    for attempt in range(1, 20):
        full = min(600.0, 3 * 2 ** (attempt - 1))
        delay = policy.delay(attempt, rng).total_seconds()
        assert full / 2 <= delay <= full, (attempt, delay)


def test_backoff_without_jitter_is_exact_and_capped():
    policy = Retry(backoff=Exponential(base=3, initial=2, cap=100))
    assert [policy.delay(n).total_seconds() for n in range(1, 7)] == [2, 6, 18, 54, 100, 100]
    assert Retry(backoff=Fixed(7)).delay(40).total_seconds() == 7
    assert Exponential(cap=600).delay(10_000) == 600  # no overflow


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Fixed(-5), "Fixed.seconds must be at least 0 and at most 31536000 (365 days)"),
        (lambda: Fixed(4e7), "Fixed.seconds must be at least 0 and at most 31536000 (365 days)"),
        (lambda: Exponential(cap=-1), "Exponential.cap must be at least 0 and at most 31536000"),
    ],
)
def test_a_delay_out_of_range_names_its_bound_readably(build, message):
    with pytest.raises(ValidationError) as raised:
        build()
    assert raised.value.code == "invalid_retry"
    [said] = raised.value.messages
    assert said.startswith(message) and "e+" not in said, said


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"max_attempts": True}, {"backoff": 5}, {"on": (int,)}, {"codes": ("",)}],
)
def test_a_bad_policy_is_refused(kwargs):
    with pytest.raises(ValidationError):
        Retry(**kwargs)


def test_a_policy_survives_its_json():
    policy = Retry(
        max_attempts=4, backoff=Fixed(3), jitter=True, on=(TimeoutError,), codes=("busy",)
    )
    again = Retry.from_json(policy.as_json())
    assert again.as_json() == policy.as_json()
    assert again.covers([exception_error(TimeoutError())])
    with pytest.raises(ValidationError):
        Retry.from_json({"backoff": "linear"})
    with pytest.raises(ValidationError):
        Retry.from_json({"backoff": "fixed", "delay": -1})
    with pytest.raises(ValidationError):
        Retry.from_json({"max_attempts": 2, "wat": 1})


def test_on_matches_subclasses_and_nothing_else():
    policy = Retry(on=(smtplib.SMTPException, TimeoutError))
    assert policy.covers([exception_error(Flaky("x"))])
    assert policy.covers([exception_error(TimeoutError())])
    assert not policy.covers([exception_error(ValueError())])
    assert not policy.covers([{"code": "empty", "args": {}, "description": ""}])
    assert policy.covers([{"code": "empty", "args": {}, "description": "", "retry": True}])
    assert Retry(codes=("busy",)).covers([{"code": "busy", "args": {}, "description": ""}])


def test_successor_rns_fit_and_differ_per_root():
    long_a, long_b = "a" * 127 + "x", "a" * 127 + "y"
    assert successor_rn("t1", 2) == "t1:retry-2"
    assert len(successor_rn(long_a, 999)) <= 128
    assert successor_rn(long_a, 2) != successor_rn(long_b, 2)


# -- abort with a policy ------------------------------------------------------------------------


def test_an_abort_the_policy_covers_submits_the_next_attempt(worker):
    Task.objects.submit(
        "default", {"n": 1}, priority=7, rn="mail-1", retry=Retry(backoff=Fixed(30))
    )
    task = leased(worker)
    successor = task.abort(worker, [exception_error(TimeoutError("slow"))])
    task.refresh_from_db()
    assert task.status == Status.ABORTED  # the aborted task stays a permanent record
    assert successor is not None and successor.status == Status.READY
    assert (successor.rn, successor.retry_of, successor.root, successor.attempt) == (
        "mail-1:retry-2",
        "mail-1",
        "mail-1",
        2,
    )
    assert (successor.queue, successor.spec, successor.priority) == ("default", {"n": 1}, 7)
    # The backoff is counted from the abort, on the database clock.
    assert successor.not_before == task.updated + timedelta(seconds=30)
    assert successor.retry_policy == task.retry_policy


def test_the_chain_stops_at_max_attempts_and_keeps_its_root(worker):
    Task.objects.submit("default", {}, rn="c", retry=Retry(max_attempts=3, backoff=Fixed(0)))
    rns = []
    for _ in range(3):
        task = leased(worker)
        rns.append(task.rn)
        successor = task.abort(worker, [exception_error(ValueError())])
    assert successor is None
    assert rns == ["c", "c:retry-2", "c:retry-3"]
    chain = Task.objects.filter(rn__in=rns).order_by("attempt")
    assert [(t.attempt, t.root, t.retry_of) for t in chain] == [
        (1, "c", None),
        (2, "c", "c"),
        (3, "c", "c:retry-2"),
    ]
    # The first task is part of its chain: one filter finds them all.
    chain_by_root = Task.objects.filter(root="c").order_by("attempt")
    assert list(chain_by_root.values_list("rn", flat=True)) == rns


def test_no_policy_no_retry_and_retry_false_wins(worker):
    Task.objects.submit("default", {})
    assert leased(worker).abort(worker, [exception_error(ValueError())]) is None
    Task.objects.submit("default", {}, retry=Retry())
    assert leased(worker).abort(worker, [exception_error(ValueError())], retry=False) is None
    assert Task.objects.count() == 2


def test_retry_true_retries_without_a_policy(worker):
    Task.objects.submit("default", {}, rn="plain")
    successor = leased(worker).abort(
        worker, {"code": "busy", "args": {}, "description": ""}, retry=True
    )
    assert successor is not None and successor.retry_of == "plain"
    assert successor.not_before is not None  # the default policy's backoff


def test_an_abort_whose_error_asks_for_a_retry_retries_without_a_policy(registry, worker):
    """`raise Abort(..., retry=True)` means what `abort(..., retry=True)` means: a retry under
    the task's policy, else the default `Retry()`; through the worker's outcomes too."""

    @handler("r-asked", registry=registry)
    def asked(ctx):
        raise Abort("busy", "come back", retry=True)

    Task.objects.submit("r-asked", {}, rn="asked")
    TaskWorker(WorkerOptions(["r-asked"], registry=registry)).run(once=True)
    successor = Task.objects.get(retry_of="asked")
    assert (successor.root, successor.attempt) == ("asked", 2)
    assert successor.not_before is not None  # the default policy's backoff

    Task.objects.submit("default", {}, rn="direct")
    task = leased(worker)
    successor = task.abort(worker, [Abort("busy", retry=True).as_error()])
    assert successor is not None and successor.retry_of == "direct"


def test_an_outcome_asking_for_a_retry_is_followed_by_one(worker):
    Task.objects.submit("default", {}, rn="batch-asked")
    task = leased(worker)
    error = Abort("busy", retry=True).as_error()
    assert Task.objects.finish_many(worker, [Outcome(task.pk, task.leases, errors=[error])])
    assert Task.objects.filter(retry_of="batch-asked", root="batch-asked").exists()
    assert Task.objects.get(rn="batch-asked").root == "batch-asked"


def test_a_retried_failure_and_the_final_one_log_different_lines(worker, caplog):
    caplog.set_level("INFO", logger="scylla_django")
    Task.objects.submit("default", {}, rn="logged", retry=Retry(max_attempts=2, backoff=Fixed(4)))
    leased(worker).abort(worker, [exception_error(ValueError())])
    assert "logged failed: retry 2 of 2 in 4 s" in caplog.messages
    Task.objects.filter(rn="logged:retry-2").update(not_before=None)
    leased(worker).abort(worker, [exception_error(ValueError())])
    assert "logged:retry-2 failed: gave up after 2 attempts" in caplog.messages


def test_a_refused_abort_submits_nothing(worker, other_worker):
    Task.objects.submit("default", {}, retry=Retry())
    task = leased(worker)
    with pytest.raises(LeaseLost):
        task.abort(other_worker, [exception_error(ValueError())])
    assert Task.objects.count() == 1


def test_a_failing_successor_insert_rolls_the_abort_back(worker, monkeypatch):
    Task.objects.submit("default", {}, rn="atomic", retry=Retry())
    task = leased(worker)

    def broken(*args, **kwargs):
        raise IntegrityError("boom")

    monkeypatch.setattr(type(db.driver("default")), "submit", broken)
    with pytest.raises(IntegrityError):
        task.abort(worker, [exception_error(ValueError())])
    assert Task.objects.get(rn="atomic").status == Status.RUNNING


def test_finish_many_submits_each_covered_abort_s_successor_once(worker):
    Task.objects.submit("default", {"n": 1}, rn="batch-retry", retry=Retry(backoff=Fixed(7)))
    Task.objects.submit("default", {}, rn="batch-plain")
    Task.objects.submit("default", {}, rn="batch-done", retry=Retry())
    leases = {t.rn: t for t in Task.objects.lease(worker, ["default"], limit=3, lease_length=60)}
    outcomes = [
        Outcome(leases["batch-retry"].pk, 1, errors=[exception_error(ValueError())]),
        Outcome(leases["batch-plain"].pk, 1, errors=[exception_error(ValueError())]),
        Outcome(leases["batch-done"].pk, 1, result=3),
    ]
    assert Task.objects.finish_many(worker, outcomes) == {t.pk for t in leases.values()}
    # Written again (a reply lost): refused by the fence, and no second successor.
    assert Task.objects.finish_many(worker, outcomes) == set()
    [successor] = Task.objects.filter(retry_of__isnull=False)
    aborted = Task.objects.get(rn="batch-retry")
    assert (successor.root, successor.attempt, successor.spec) == ("batch-retry", 2, {"n": 1})
    assert successor.not_before == aborted.updated + timedelta(seconds=7)
    assert successor.status == Status.READY


def test_a_failing_successor_insert_rolls_finish_many_back(worker, monkeypatch):
    Task.objects.submit("default", {}, rn="batch-atomic", retry=Retry())
    task = leased(worker)

    def broken(*args, **kwargs):
        raise IntegrityError("boom")

    monkeypatch.setattr(type(db.driver("default")), "submit", broken)
    with pytest.raises(IntegrityError):
        Task.objects.finish_many(
            worker, [Outcome(task.pk, 1, errors=[exception_error(KeyError())])]
        )
    assert Task.objects.get(rn="batch-atomic").status == Status.RUNNING


def test_submit_many_keeps_each_item_s_policy():
    outcomes = Task.objects.submit_many(
        [
            {"queue": "default", "spec": {}, "rn": "many-own", "retry": {"max_attempts": 4}},
            {"queue": "default", "spec": {}, "rn": "many-none"},
        ]
    )
    assert [o.outcome for o in outcomes] == ["inserted", "inserted"]
    assert Task.objects.get(rn="many-own").retry_policy["max_attempts"] == 4
    assert Task.objects.get(rn="many-none").retry_policy is None


def test_the_schema_refuses_a_second_successor(worker):
    if not connection.features.supports_partial_indexes:
        pytest.skip(
            "MariaDB/MySQL have no partial unique constraints; there the successor's unique rn "
            "(root and attempt) is what refuses a second one"
        )
    Task.objects.submit("default", {}, rn="fork", retry=Retry())
    leased(worker).abort(worker, [exception_error(ValueError())])
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.create(rn="fork-b", queue="default", spec={}, retry_of="fork", root="fork")


# -- retrying by hand ---------------------------------------------------------------------------


def test_an_aborted_or_cancelled_task_can_be_retried_by_hand_once(worker):
    Task.objects.submit("default", {"a": 1}, rn="hand")
    task = leased(worker)
    task.abort(worker, [{"code": "no", "args": {}, "description": ""}])
    again = task.retry()
    assert (again.rn, again.retry_of, again.attempt, again.not_before) == (
        "hand:retry-2",
        "hand",
        2,
        None,
    )
    with pytest.raises(DuplicateTask) as exc:
        task.retry()
    assert exc.value.rn == "hand:retry-2"
    again.cancel()
    assert again.retry().rn == "hand:retry-3"


def test_a_ready_task_cannot_be_retried():
    task = Task.objects.submit("default", {})
    with pytest.raises(InvalidTransition):
        task.retry()


# -- handlers and the worker --------------------------------------------------------------------


@pytest.fixture
def registry():
    local = HandlerRegistry()
    yield local
    for queue in local.queues():
        register_policy(queue, None)


def test_the_worker_applies_the_handler_s_policy(registry):
    @handler(
        "r-mail", registry=registry, retry=Retry(on=(smtplib.SMTPException,), backoff=Fixed(0))
    )
    def send(ctx):
        if ctx.spec["kind"] == "flaky":
            raise Flaky("try later")
        if ctx.spec["kind"] == "asked":
            raise Abort("busy", "come back", retry=True)
        raise ValueError("bug")

    assert queue_policy("r-mail") is not None
    for kind in ("flaky", "asked", "bug"):
        Task.objects.submit("r-mail", {"kind": kind}, rn=kind)
    TaskWorker(WorkerOptions(["r-mail"], registry=registry, concurrency=3)).run(once=True)
    retried = set(Task.objects.filter(retry_of__isnull=False).values_list("retry_of", flat=True))
    assert retried == {"flaky", "asked"}
    assert Task.objects.get(rn="asked").errors[0]["retry"] is True


def test_a_task_s_own_policy_overrides_its_handler_s(registry, worker):
    register_policy("default", Retry(max_attempts=5))
    registry.register("default", lambda ctx: None)
    Task.objects.submit("default", {}, rn="own", retry=Retry(max_attempts=1))
    assert leased(worker).abort(worker, [exception_error(ValueError())]) is None


def test_lease_lengths_past_max_attempts_are_retried(settings, worker):
    settings.SCYLLA = {"MAX_LEASES": 1}
    Task.objects.submit("default", {}, rn="slow", retry=Retry(backoff=Fixed(5)))
    Task.objects.submit("default", {}, rn="slow-no-timeouts", retry=Retry(crashes=False))
    for task in Task.objects.lease(worker, ["default"], limit=2, lease_length=60):
        expire(task)
    assert Task.objects.reset_expired() == 2
    successor = Task.objects.get(retry_of="slow")
    assert successor.attempt == 2
    aborted = Task.objects.get(rn="slow")
    assert aborted.errors[0]["code"] == "max_leases_exceeded"
    assert successor.not_before == aborted.updated + timedelta(seconds=5)
    assert not Task.objects.filter(retry_of="slow-no-timeouts").exists()


def test_a_task_aborted_at_its_run_time_limit_is_retried_by_a_policy_that_retries_timeouts(
    worker,
):
    """`Retry(timeouts=True)` (the default) retries the run-time limit's abort, `timeout`, as
    the worker writes it; `timeouts=False` does not, whatever `crashes` says."""
    timeout = TaskTimedOut("ran past its 1s timeout", timeout=1.0).as_error()
    for rn, policy in (
        ("timed", Retry(timeouts=True, crashes=False)),
        ("timed-default", Retry()),
        ("timed-no", Retry(timeouts=False, crashes=True)),
    ):
        Task.objects.submit("default", {}, rn=rn, retry=policy, timeout=1)
        task = leased(worker)
        successor = task.abort(worker, [timeout])
        assert (successor is not None) == (rn != "timed-no"), rn
        if successor is not None:
            assert successor.retry_of == rn and successor.timeout == timedelta(seconds=1)


def test_crashes_and_timeouts_are_separate_switches():
    timeout = {"code": "timeout"}
    exhausted = {"code": "max_leases_exceeded", "args": {"max_leases": 1}}
    cpu = {"code": "cpu_limit", "args": {"cpu_limit": 1.0}}
    assert Retry().covers([timeout]) and Retry().covers([exhausted])
    only_timeouts = Retry(crashes=False)
    assert only_timeouts.covers([timeout])
    assert not only_timeouts.covers([exhausted])
    only_crashes = Retry(timeouts=False)
    assert not only_crashes.covers([timeout])
    assert only_crashes.covers([exhausted])
    # A CPU limit is the task's own doing, not a worker failure: retried only when named.
    assert not Retry().covers([cpu]) and Retry(codes=("cpu_limit",)).covers([cpu])
    assert Retry.from_json({"crashes": False}).as_json() == only_timeouts.as_json()
    assert Retry.from_json(only_crashes.as_json()).as_json() == only_crashes.as_json()
    with pytest.raises(ValidationError):
        Retry(crashes="yes")


def test_the_docs_and_the_docstring_name_the_codes_each_switch_retries():
    """The policy table of docs/howto/retries.md and `Retry`'s docstring name exactly the codes
    each of `timeouts` and `crashes` matches."""
    text = page("howto/retries.md").read_text()
    for switch, codes in (("timeouts", TIMEOUT_CODES), ("crashes", CRASH_CODES)):
        pattern = rf"^\| `{switch}=True` \(default\) \|(.*)\|$"
        [row] = re.findall(pattern, text, re.MULTILINE)
        named = set(re.findall(r"`([a-z_]+)`", row))  # the codes, in backquotes
        assert named == set(codes), (switch, named)
        for code in codes:
            assert Retry(**{switch: True}).covers([{"code": code}])
            assert not Retry(**{switch: False}).covers([{"code": code}])
        [item] = re.findall(rf"- `{switch}`: (.*?)(?=\n\s*- |$)", Retry.__doc__ or "", re.DOTALL)
        assert set(re.findall(r"`([a-z_]+)`", item)) & set(TIMEOUT_CODES + CRASH_CODES) == set(
            codes
        ), (switch, item)


# -- exactly once under concurrency -------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.concurrency
def test_three_monitors_give_each_exhausted_task_exactly_one_successor(settings, worker):
    settings.SCYLLA = {"MAX_LEASES": 1}
    count = 300
    Task.objects.submit_many({"queue": "default", "spec": {"n": n}} for n in range(count))
    Task.objects.filter(queue="default").update(retry_policy=Retry(backoff=Fixed(0)).as_json())
    tasks = Task.objects.lease(worker, ["default"], limit=count, lease_length=60)
    Task.objects.filter(pk__in=[t.pk for t in tasks]).update(
        deadline=tasks[0].deadline - timedelta(hours=1)
    )

    handled = run_in_threads([lambda _: Task.objects.reset_expired(chunk_size=7)] * 3)

    assert sum(handled) == count
    successors = Task.objects.filter(retry_of__isnull=False)
    assert successors.count() == count
    assert set(successors.values_list("retry_of", flat=True)) == {t.rn for t in tasks}


@pytest.mark.postgres
@pytest.mark.concurrency
def test_concurrent_duplicate_aborts_submit_one_successor(worker):
    Task.objects.submit("default", {}, rn="dup", retry=Retry(backoff=Fixed(0)))
    task = leased(worker)

    def abort(_):
        copy = Task.objects.get(pk=task.pk)
        try:
            return copy.abort(worker, [exception_error(ValueError())])
        except InvalidTransition:
            return None

    results = run_in_threads([abort] * 3)
    assert len([r for r in results if r is not None]) == 1
    assert Task.objects.filter(retry_of="dup").count() == 1
