"""The admin's "my tasks" filter, the submitter and the start forecast on a task's page, and
`cancel_own_task` in the "cancel selected" action."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from scylla_django.enums import Status
from scylla_django.models import Submitter, Task, Worker
from scylla_django.models.key_control import set_limit
from tests.helpers import messages_of, staff

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:scylla_django_task_changelist"


def test_my_tasks_filter_and_the_submitter_on_the_page():
    client = staff("view_task")
    me = User.objects.get(username="staff-view_task")
    other = User.objects.create_user("other")
    mine = Task.objects.submit("q", {}, rn="mine", submitter=Submitter.of(me, description="x"))
    Task.objects.submit("q", {}, rn="theirs", submitter=Submitter.of(other))
    Task.objects.submit("q", {}, rn="system")
    page = client.get(reverse(CHANGELIST), {"submitted": "me"}).content.decode()
    assert "mine" in page and "theirs" not in page and ">system<" not in page
    page = client.get(reverse(CHANGELIST), {"submitted": "system"}).content.decode()
    assert ">system<" in page and "theirs" not in page
    detail = client.get(reverse("admin:scylla_django_task_change", args=[mine.pk]))
    text = detail.content.decode()
    assert "Submitted by" in text and "staff-view_task: x" in text


@pytest.mark.keys  # limits and admission keys: not on MySQL/MariaDB
def test_the_page_of_a_ready_task_shows_its_forecast():
    client = staff("view_task")
    set_limit("stripe", 1)
    Worker.objects.register(queues=["q"], capacity=2)
    Task.objects.submit("q", {}, limits=["stripe"])
    task = Task.objects.submit("q", {}, limits=["stripe"])
    text = client.get(reverse("admin:scylla_django_task_change", args=[task.pk])).content.decode()
    assert "Starts" in text
    assert "no run time measured on this queue yet" in text


def test_cancel_selected_with_cancel_own_task_cancels_only_ones_own():
    client = staff("view_task", "cancel_own_task")
    me = User.objects.get(username="staff-view_task-cancel_own_task")
    mine = Task.objects.submit("q", {}, submitter=Submitter.of(me))
    theirs = Task.objects.submit("q", {})
    response = client.post(
        reverse(CHANGELIST),
        {"action": "cancel_selected", "index": "0", "_selected_action": [mine.pk, theirs.pk]},
        follow=True,
    )
    assert messages_of(response) == ["1 cancelled, 1 skipped (not ready or running)."]
    assert Task.objects.get(pk=mine.pk).status == Status.CANCELLED
    assert Task.objects.get(pk=theirs.pk).status == Status.READY
