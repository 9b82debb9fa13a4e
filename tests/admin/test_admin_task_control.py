"""The admin's hold and release actions on selected tasks: the ready ones are held (never
leased), the others skipped; the detail page says a held task's not-before is "held"; an
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


def test_hold_and_release_selected(admin_client, worker):
    ready = Task.objects.submit("default", {}, rn="ready")
    other = Task.objects.submit("default", {}, rn="other")
    [running] = Task.objects.lease(worker, ["default"], limit=1)
    assert running.rn == "ready"
    [message] = messages_of(act(admin_client, "hold_selected", ready, other))
    assert message == "1 held, 1 skipped."
    other.refresh_from_db()
    assert other.is_held
    page = admin_client.get(reverse("admin:scylla_django_task_change", args=[other.pk]))
    assert "held by admin" in page.content.decode()
    assert Task.objects.lease(worker, ["default"], limit=5) == []
    [message] = messages_of(act(admin_client, "release_selected", ready, other))
    assert message == "1 released, 1 skipped."
    other.refresh_from_db()
    assert not other.is_held


def test_the_actions_need_control_queue(client, db):
    user = make_user("viewer", "view_task", "cancel_task", is_staff=True)
    client.force_login(user)
    choices = dict(client.get(LIST).context["action_form"].fields["action"].choices)
    assert "hold_selected" not in choices and "release_selected" not in choices
