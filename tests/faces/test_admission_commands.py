"""The admission and forecast commands: `scylla_queue cap`, `scylla_tasks eta` and `show`."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scylla_django.models import QueueSetting, Submitter, Task, Worker
from scylla_django.models.key_control import set_limit

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_scylla_queue_cap_sets_lists_and_clears_a_cap():
    assert "at most 5 ready (shed_oldest)" in run(
        "scylla_queue", "cap", "emails", "5", "--on-full", "shed_oldest"
    )
    assert QueueSetting.objects.of("emails").max_ready == 5
    assert "max_ready=5 (shed_oldest)" in run("scylla_queue", "list")
    run("scylla_queue", "cap", "emails", "--none")
    assert QueueSetting.objects.of("emails").max_ready is None
    with pytest.raises(CommandError, match="--none"):
        run("scylla_queue", "cap", "emails", "0")


@pytest.mark.keys  # limits and admission keys: not on MySQL/MariaDB
def test_scylla_tasks_eta_names_the_bottleneck_and_answers_what_if():
    set_limit("stripe", 1)
    Worker.objects.register(queues=["q"], capacity=4)
    first = Task.objects.submit("q", {}, rn="first", limits=["stripe"])
    Task.objects.submit("q", {}, rn="second", limits=["stripe"])
    third = Task.objects.submit("q", {}, rn="third", limits=["stripe"])
    out = run("scylla_tasks", "eta", third.rn, "--what-if", "run_time=60")
    assert "limit stripe 0/1, 2 ahead: about 2 min" in out
    assert "* limit stripe" in out
    out = run(
        "scylla_tasks", "eta", third.rn, "--what-if", "run_time=60", "--what-if", "limit.stripe=3"
    )
    assert "what if limit.stripe=3, run_time=60" in out and "may start now" in out
    assert "unknown" in run("scylla_tasks", "eta", third.rn)  # no run time measured yet
    with pytest.raises(CommandError, match="Unknown what-if"):
        run("scylla_tasks", "eta", third.rn, "--what-if", "speed=2")
    assert "starts" in run("scylla_tasks", "show", first.rn)


def test_scylla_tasks_show_names_the_submitter(django_user_model):
    user = django_user_model.objects.create_user("ann")
    task = Task.objects.submit("q", {}, submitter=Submitter.of(user, description="import"))
    assert "submitted by  ann: import" in run("scylla_tasks", "show", task.rn)
    assert "submitted by  system" in run("scylla_tasks", "show", Task.objects.submit("q", {}).rn)
