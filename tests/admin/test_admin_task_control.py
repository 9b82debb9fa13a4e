"""The admin's pause and resume actions on selected tasks: the ready ones are paused (never
leased), the others skipped; the detail page says a paused task's not-before is "paused"; an
operator without `control_queue` is not offered them."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scylla_django.models import Task
from tests.helpers import make_user, messages_of

pytestmark = pytest.mark.django_db

LIST = reverse("admin:scylla_django_task_changelist")


def act(client, action: str, *tasks: Task):
    data = {"action": action, "index": "0", "_selected_action": [t.pk for t in tasks]}
    return client.post(LIST, data, follow=True)


def test_pause_and_resume_selected(admin_client, worker):
    ready = Task.objects.submit("default", {}, rn="ready")
    other = Task.objects.submit("default", {}, rn="other")
    [running] = Task.objects.lease(worker, ["default"], limit=1)
    assert running.rn == "ready"
    [message] = messages_of(act(admin_client, "pause_selected", ready, other))
    assert message == "1 paused, 1 skipped."
    other.refresh_from_db()
    assert other.is_paused
    page = admin_client.get(reverse("admin:scylla_django_task_change", args=[other.pk]))
    assert "paused by admin" in page.content.decode()
    assert Task.objects.lease(worker, ["default"], limit=5) == []
    [message] = messages_of(act(admin_client, "resume_selected", ready, other))
    assert message == "1 resumed, 1 skipped."
    other.refresh_from_db()
    assert not other.is_paused


def test_the_actions_need_control_queue(client, db):
    user = make_user("viewer", "view_task", "cancel_task", is_staff=True)
    client.force_login(user)
    choices = dict(client.get(LIST).context["action_form"].fields["action"].choices)
    assert "pause_selected" not in choices and "resume_selected" not in choices
