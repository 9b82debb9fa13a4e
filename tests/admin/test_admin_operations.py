"""The console's operations: reset lease now, cancel, error codes, queue pause and resume."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now
from django.urls import reverse

from scylla_django.enums import EventType, Status
from scylla_django.exceptions import LeaseLost
from scylla_django.models import QueueSetting, Task, Worker
from tests.factories import TaskFactory, running_task
from tests.helpers import messages_of, reload, staff, typs

pytestmark = pytest.mark.django_db

LIST = reverse("admin:scylla_django_task_changelist")
DASHBOARD = reverse("admin:scylla_django_task_dashboard")


def page(pk: int) -> str:
    return reverse("admin:scylla_django_task_change", args=[pk])


def kill(worker: Worker) -> None:
    Worker.objects.filter(pk=worker.pk).update(
        silent_at=Now() - timedelta(minutes=1), dead_at=Now() - timedelta(seconds=1)
    )


def test_reset_lease_now_button_only_for_a_running_task_whose_owner_is_gone(admin_client, worker):
    task = running_task(worker, rn="held")
    reset = reverse("admin:scylla_django_task_reset_lease", args=[task.pk])
    assert reset not in admin_client.get(page(task.pk)).content.decode()  # the owner is alive
    kill(worker)
    html = admin_client.get(page(task.pk)).content.decode()
    assert f'action="{reset}"' in html
    assert f'name="owner" value="{worker.name}"' in html
    assert 'name="lease" value="1"' in html
    assert "Cancel task" in html

    response = admin_client.post(reset, {"owner": worker.name, "lease": "1"}, follow=True)
    assert any("Lease reset" in m for m in messages_of(response))
    task = reload(task)
    assert (task.status, task.owner) == (Status.READY, None)
    assert typs(task)[-1] == EventType.TIMEOUT
    with pytest.raises(LeaseLost):  # the worker resumes: its write is refused
        task.heartbeat(worker)


def test_reset_lease_now_is_fenced_on_the_owner_and_lease_shown(admin_client, worker):
    task = running_task(worker, rn="held")
    reset = reverse("admin:scylla_django_task_reset_lease", args=[task.pk])
    response = admin_client.post(reset, {"owner": worker.name, "lease": "1"}, follow=True)
    assert any("last heartbeat was" in m for m in messages_of(response))  # OwnerAlive
    kill(worker)
    response = admin_client.post(reset, {"owner": worker.name, "lease": "2"}, follow=True)
    assert any("not by" in m for m in messages_of(response))  # LeaseLost: another lease
    response = admin_client.post(reset, {"owner": "", "lease": "x"}, follow=True)
    assert any("needs the owner" in m for m in messages_of(response))
    assert reload(task).status == Status.RUNNING
    assert admin_client.get(reset).status_code == 403  # POST only
    assert staff("view_task").post(reset, {"owner": worker.name, "lease": "1"}).status_code == 403
    missing = reverse("admin:scylla_django_task_reset_lease", args=[999999])
    assert admin_client.post(missing, {"owner": worker.name, "lease": "1"}).status_code == 404


def test_cancel_button(admin_client):
    task = TaskFactory(rn="c")
    cancel = reverse("admin:scylla_django_task_cancel", args=[task.pk])
    assert f'action="{cancel}"' in admin_client.get(page(task.pk)).content.decode()
    assert f'action="{cancel}"' not in staff("view_task").get(page(task.pk)).content.decode()
    admin_client.post(cancel)
    assert reload(task).status == Status.CANCELLED
    assert f'action="{cancel}"' not in admin_client.get(page(task.pk)).content.decode()
    response = admin_client.post(cancel, follow=True)
    assert any("Not cancelled" in m for m in messages_of(response))


def test_error_code_column_and_filter(admin_client, worker):
    running_task(worker, rn="t1", queue="mail").abort(worker, [{"code": "smtp_timeout"}])
    running_task(worker, rn="t2", queue="mail").abort(worker, [{"code": "bounced"}])
    TaskFactory(rn="ok")
    html = admin_client.get(LIST).content.decode()
    assert f'href="{LIST}?error_code=smtp_timeout"><code>smtp_timeout</code></a>' in html
    response = admin_client.get(LIST, {"error_code": "bounced"})
    assert [t.rn for t in response.context["cl"].result_list] == ["t2"]
    assert admin_client.get(LIST, {"error_code": "x" * 201}).status_code == 302  # bad lookup


def test_dashboard_groups_failures_and_warns_of_dead_holders(admin_client, worker):
    running_task(worker, rn="f1", queue="mail").abort(worker, [{"code": "smtp_timeout"}])
    running_task(worker, rn="f2", queue="mail").abort(worker, [{"code": "smtp_timeout"}])
    running_task(worker, rn="held")
    kill(worker)
    html = admin_client.get(DASHBOARD).content.decode()
    link = f'href="{LIST}?status=aborted&amp;queue=mail&amp;error_code=smtp_timeout">2</a>'
    assert link in html
    assert 'id="scylla-workers-gone"' in html
    assert '<span class="scylla-badge scylla-dead">dead</span>' in html


def test_dashboard_says_when_the_monitor_last_ran(admin_client):
    from scylla_django.models import Monitor

    monitor = Monitor.objects.register(60)
    monitor.touch(reset=0, purged=0)
    html = admin_client.get(DASHBOARD).content.decode()
    assert 'id="scylla-monitor"' in html and 'id="scylla-monitor-missing"' not in html
    Monitor.objects.update(dead_at=Now() - timedelta(seconds=1))
    html = admin_client.get(DASHBOARD).content.decode()
    assert 'id="scylla-monitor-missing"' in html
    assert "the monitor resets them" not in html


def test_pause_and_resume_a_queue_from_the_dashboard(admin_client, worker):
    TaskFactory(rn="m", queue="mail")
    pause = reverse("admin:scylla_django_queue_control", args=["mail", "pause"])
    resume = reverse("admin:scylla_django_queue_control", args=["mail", "resume"])
    assert f'action="{pause}"' in admin_client.get(DASHBOARD).content.decode()
    admin_client.post(pause)
    assert QueueSetting.objects.of("mail").paused
    html = admin_client.get(DASHBOARD).content.decode()
    assert f'action="{resume}"' in html and "scylla-badge scylla-paused" in html
    assert Task.objects.lease(worker, ["mail"]) == []
    admin_client.post(resume)
    assert [t.rn for t in Task.objects.lease(worker, ["mail"])] == ["m"]
    viewer = staff("view_task")
    assert f'action="{pause}"' not in viewer.get(DASHBOARD).content.decode()
    assert viewer.post(pause).status_code == 403
    assert admin_client.get(pause).status_code == 403
    bad = reverse("admin:scylla_django_queue_control", args=["mail", "explode"])
    assert admin_client.post(bad).status_code == 404
    bad_queue = reverse("admin:scylla_django_queue_control", args=["-bad", "pause"])
    response = admin_client.post(bad_queue, follow=True)
    assert any("queue name" in m for m in messages_of(response))
