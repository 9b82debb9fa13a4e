"""Retry policies from the settings: `SCYLLA["RETRY"]` by queue, and its default `"*"`.

A task's policy is its own (given at submit), else its queue's entry in the setting, else its
handler's, else the setting's default, else none; a bad entry is the error
`scylla_django.E030` at `manage.py check`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from scylla_django import Exponential, Retry, handler
from scylla_django.checks import check_retry_policies, check_settings
from scylla_django.handlers import HandlerRegistry
from scylla_django.models import Task, Worker
from scylla_django.retries import queue_policy, register_policy
from scylla_django.testing import run_task
from tests.docs import page
from tests.helpers import expire

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def registry():
    local = HandlerRegistry()
    yield local
    for queue in local.queues():
        register_policy(queue, None)


def failing(registry: HandlerRegistry, queue: str, retry: Retry | None = None) -> None:
    @handler(queue, registry=registry, retry=retry)
    def fail(ctx):
        raise ValueError("down")


def run_and_follow(rn: str, registry: HandlerRegistry) -> tuple[Task, Task | None]:
    """Run `rn` (its handler fails); return it as aborted and its retry, if one was made."""
    aborted = run_task(rn, registry=registry)
    assert aborted.status == "aborted"
    return aborted, Task.objects.filter(retry_of=rn).first()


def test_a_handler_without_a_policy_is_retried_as_the_setting_says(settings, registry):
    failing(registry, "rs-mail")
    Task.objects.submit("rs-mail", {}, rn="before")
    assert run_and_follow("before", registry)[1] is None  # no policy anywhere: no retry

    settings.SCYLLA = {
        "RETRY": {"rs-mail": {"max_attempts": 2, "backoff": "fixed", "delay": 7, "timeouts": True}}
    }
    Task.objects.submit("rs-mail", {}, rn="mail")
    aborted, successor = run_and_follow("mail", registry)
    assert successor is not None and successor.attempt == 2
    assert successor.not_before == aborted.updated + timedelta(seconds=7)
    assert successor.retry_policy is None  # read from the setting again, not copied
    Task.objects.filter(pk=successor.pk).update(not_before=None)
    _, third = run_and_follow(successor.rn, registry)
    assert third is None  # max_attempts 2: the chain ends with the setting's policy


def test_the_setting_overrides_the_handler_s_policy(settings, registry):
    failing(registry, "rs-sync", retry=Retry(max_attempts=1))
    settings.SCYLLA = {
        "RETRY": {"rs-sync": {"max_attempts": 3, "backoff": "exponential", "delay": 10, "cap": 15}}
    }
    Task.objects.submit("rs-sync", {}, rn="sync")
    aborted, second = run_and_follow("sync", registry)
    assert second is not None
    assert second.not_before == aborted.updated + timedelta(seconds=10)
    Task.objects.filter(pk=second.pk).update(not_before=None)
    aborted, third = run_and_follow(second.rn, registry)
    assert third is not None and third.attempt == 3
    assert third.not_before == aborted.updated + timedelta(seconds=15)  # 20, capped


def test_the_precedence_of_the_four_policies(settings, registry):
    own = Retry(max_attempts=9)
    handlers = Retry(max_attempts=4)
    register_policy("rs-handled", handlers)
    registry.register("rs-handled", lambda ctx: None)
    settings.SCYLLA = {"RETRY": {"rs-set": {"max_attempts": 5}, "*": {"max_attempts": 2}}}
    register_policy("rs-set", handlers)
    registry.register("rs-set", lambda ctx: None)
    assert queue_policy("rs-set") == Retry(max_attempts=5)  # the setting's entry > handler's
    assert queue_policy("rs-handled") == handlers  # the handler's > the setting's default
    assert queue_policy("rs-other") == Retry(max_attempts=2)  # the default, for the rest
    settings.SCYLLA = {}
    assert queue_policy("rs-other") is None

    settings.SCYLLA = {"RETRY": {"rs-set": {"max_attempts": 1}}}
    Task.objects.submit("rs-set", {}, rn="own", retry=own)
    worker = Worker.objects.register(queues=["rs-set"], capacity=1, hostname="t", pid=1)
    [task] = Task.objects.lease(worker, ["rs-set"], lease_length=60)
    successor = task.abort(worker, [{"code": "exception", "args": {"type": "x.Y"}}])
    assert successor is not None  # the task's own policy (9 attempts) > the setting's (1)


def test_the_default_covers_a_queue_without_a_handler_here(settings):
    """The default reaches the monitor's aborts too: an expired lease past `MAX_LEASES` on a
    queue whose handler this process never imported is retried under `"*"`."""
    settings.SCYLLA = {"MAX_LEASES": 1, "RETRY": {"*": {"backoff": "fixed", "delay": 3}}}
    worker = Worker.objects.register(queues=["rs-far"], capacity=1, hostname="t", pid=1)
    Task.objects.submit("rs-far", {}, rn="far")
    [task] = Task.objects.lease(worker, ["rs-far"], lease_length=60)
    expire(task)
    assert Task.objects.reset_expired() == 1
    aborted = Task.objects.get(rn="far")
    assert aborted.errors[0]["code"] == "max_leases_exceeded"
    successor = Task.objects.get(retry_of="far")
    assert successor.not_before == aborted.updated + timedelta(seconds=3)


@pytest.mark.parametrize(
    ("retry", "where", "said"),
    [
        ({"emails": {"max_attempts": 5, "backof": "fixed"}}, "['emails']", "backof"),
        ({"emails": {"max_attempts": 0}}, "['emails']", "max_attempts"),
        ({"emails": {"backoff": "linear"}}, "['emails']", "backoff"),
        ({"*": {"cap": -1}}, "['*']", "cap"),
        ({"emails": {"on": "smtplib.SMTPException"}}, "['emails']", "on"),
        ({"emails": [5]}, "['emails']", "A retry policy is an object"),
        ({"bad queue!": {}}, "['bad queue!']", "queue name"),
        ([{"max_attempts": 5}], "", "must be a dict"),
    ],
)
def test_a_bad_entry_is_an_error_at_check_naming_its_queue_and_key(settings, retry, where, said):
    settings.SCYLLA = {"RETRY": retry}
    [error] = check_retry_policies()
    assert error.id == "scylla_django.E030"
    assert error.msg.startswith(f"SCYLLA['RETRY']{where}: ")
    assert said in error.msg
    assert check_settings() == []  # reported once, by its own check
    assert "scylla_django.E030" in {message.id for message in run_checks()}
    with pytest.raises(SystemCheckError, match=r"scylla_django\.E030"):
        call_command("check")


def test_a_bad_entry_is_ignored_where_policies_are_looked_up(settings):
    settings.SCYLLA = {"RETRY": {"rs-x": {"max_attempts": 0}, "*": {"max_attempts": 4}}}
    assert queue_policy("rs-x") == Retry(max_attempts=4)
    settings.SCYLLA = {"RETRY": "nonsense"}
    assert queue_policy("rs-x") is None


def test_a_good_setting_passes_the_check(settings):
    settings.SCYLLA = {
        "RETRY": {
            "emails": {
                "max_attempts": 5,
                "backoff": "exponential",
                "delay": 10,
                "cap": 600,
                "timeouts": True,
                "on": ["smtplib.SMTPException"],
            },
            "*": {"max_attempts": 2},
        }
    }
    assert check_retry_policies() == []
    call_command("check")


def test_the_documented_setting_and_error_are_as_shown(settings):
    readme = page("howto/retries.md").read_text()
    section = readme[readme.index("**From the settings, without a deploy.**") :]
    block = section[section.index("```python\n") + 10 : section.index("```\n", 10)]
    namespace: dict[str, object] = {}
    exec(block, namespace)  # the page's own example
    settings.SCYLLA = namespace["SCYLLA"]
    assert check_retry_policies() == []
    assert queue_policy("emails") == Retry(
        max_attempts=5, backoff=Exponential(initial=10, cap=600), timeouts=True
    )
    assert queue_policy("reports") == Retry(max_attempts=2)
    settings.SCYLLA = {"RETRY": {"emails": {"backof": "fixed"}}}
    [error] = check_retry_policies()
    assert f"`{error.msg}`" in " ".join(section.split())
