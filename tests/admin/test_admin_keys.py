"""The admin and the keys the lease takes: the "Locks and limits" page (force-release of a hold),
limits and rates changed at runtime, the Hold admin's action, the task list's `?key=` filter,
the task page's keys and waiting line, and the release of an order key."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from scylla_django.models import Hold, Limit, Rate, Task, keys
from tests.helpers import messages_of, staff, typs

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

LIST = reverse("admin:scylla_django_task_changelist")
KEYS = reverse("admin:scylla_django_task_keys")


@pytest.fixture(autouse=True)
def configured(settings):
    settings.SCYLLA = {"LIMITS": {"stripe": 2}, "RATES": {"sms": "3/m"}}


def lease(worker, limit: int = 10) -> list[Task]:
    return Task.objects.lease(worker, ["default"], limit=limit, lease_length=timedelta(seconds=60))


def test_the_page_shows_locks_limits_and_rates_with_their_use(admin_client, worker):
    task = Task.objects.submit("default", 1, rn="inv-7", locks=["invoice:7"], limits=["stripe"])
    Task.objects.submit("default", 2, rate_key="sms")
    lease(worker)
    token = keys.acquire_lock("nightly", ttl=None)
    response = admin_client.get(KEYS)
    assert response.status_code == 200
    [(key, holder), (nightly, hold)] = [
        (lock.key, lock.holder or lock.hold) for lock in response.context["locks"]
    ]
    assert (key, holder, nightly, hold) == ("invoice:7", task.rn, "nightly", token)
    assert [(u.name, u.running, u.max_running) for u in response.context["limits"]] == [
        ("stripe", 1, 2)
    ]
    assert [(u.name, u.starts, u.count) for u in response.context["rates"]] == [("sms", 1, 3)]
    html = response.content.decode()
    assert "1/2" in html and "1/3" in html and f"scylla-release-hold-{token}" in html
    assert admin_client.get(LIST).context["scylla_keys_url"] == KEYS


def test_a_hold_is_force_released_from_the_page(admin_client, worker):
    token = keys.acquire_lock("invoice:7", ttl=None)
    response = admin_client.post(KEYS, {"hold": token}, follow=True)
    assert f"Hold {token} force-released." in messages_of(response)
    assert not Hold.objects.exists()
    again = admin_client.post(KEYS, {"hold": token}, follow=True)
    assert f"No hold {token} to release." in messages_of(again)


def test_a_viewer_sees_the_page_but_cannot_release_or_change(worker):
    token = keys.acquire_lock("invoice:7", ttl=None)
    viewer = staff("view_task")
    response = viewer.get(KEYS)
    assert response.status_code == 200
    assert "Force-release" not in response.content.decode()
    assert viewer.post(KEYS, {"hold": token}).status_code == 403
    assert Hold.objects.filter(pk=token).exists()
    Limit.objects.create(name="stripe", max_running=2)
    change = reverse("admin:scylla_django_limit_change", args=["stripe"])
    assert viewer.post(change, {"max_running": 9}).status_code == 403
    assert Limit.objects.get(name="stripe").max_running == 2
    assert staff().get(KEYS).status_code == 403


def test_a_limit_is_changed_in_its_form_and_the_next_lease_uses_it(worker):
    operator = staff("view_task", "control_queue")
    for n in range(3):
        Task.objects.submit("default", n, limits=["stripe"])
    assert len(lease(worker)) == 2
    change = reverse("admin:scylla_django_limit_change", args=["stripe"])
    assert operator.get(change).status_code == 200
    response = operator.post(change, {"max_running": 3})
    assert response.status_code == 302, response.content
    assert Limit.objects.get(name="stripe").max_running == 3
    assert len(lease(worker)) == 1
    bad = operator.post(change, {"max_running": 0})
    assert bad.status_code == 200 and bad.context["adminform"].form.errors
    assert Limit.objects.get(name="stripe").max_running == 3


def test_a_limit_and_a_rate_are_added_in_the_admin():
    operator = staff("view_task", "control_queue")
    added = operator.post(
        reverse("admin:scylla_django_limit_add"), {"name": "pdf", "max_running": 4}
    )
    assert added.status_code == 302, added.content
    assert Limit.objects.get(name="pdf").max_running == 4
    made = operator.post(reverse("admin:scylla_django_rate_add"), {"name": "mail", "rate": "5/10s"})
    assert made.status_code == 302, made.content
    assert (Rate.objects.get(name="mail").count, Rate.objects.get(name="mail").seconds) == (5, 10.0)
    bad = operator.post(
        reverse("admin:scylla_django_rate_add"), {"name": "x", "rate": "5/fortnight"}
    )
    assert bad.status_code == 200 and "rate" in bad.context["adminform"].form.errors
    assert not Rate.objects.filter(name="x").exists()


def test_a_rate_is_changed_in_its_form(worker):
    operator = staff("view_task", "control_queue")
    for n in range(4):
        Task.objects.submit("default", n, rate_key="sms")
    assert len(lease(worker)) == 3
    change = reverse("admin:scylla_django_rate_change", args=["sms"])
    assert operator.get(change).context["adminform"].form["rate"].value() == "3/m"
    response = operator.post(change, {"rate": "4/m"})
    assert response.status_code == 302, response.content
    assert Rate.objects.get(name="sms").count == 4
    assert len(lease(worker)) == 1


def test_the_hold_admin_force_releases_selected_holds():
    operator = staff("view_task", "control_queue")
    tokens = [keys.acquire_lock(name, ttl=None) for name in ("a", "b")]
    changelist = reverse("admin:scylla_django_hold_changelist")
    response = operator.post(
        changelist,
        {"action": "force_release_selected", "_selected_action": [tokens[0]]},
        follow=True,
    )
    assert "1 holds force-released." in messages_of(response)
    assert list(Hold.objects.values_list("pk", flat=True)) == [tokens[1]]
    assert staff("view_task").get(changelist).context["action_form"] is None  # no action


def test_the_task_list_is_filtered_by_any_key(admin_client):
    Task.objects.submit("q", 1, rn="lock", locks=[("invoice:7", "shared")])
    Task.objects.submit("q", 2, rn="order", order_key="invoice:7")
    Task.objects.submit("q", 3, rn="unique", unique_key="invoice:7")
    Task.objects.submit("q", 4, rn="limit", limits=["stripe"])
    Task.objects.submit("q", 5, rn="other")
    response = admin_client.get(LIST, {"key": "invoice:7"})
    assert {t.rn for t in response.context["cl"].result_list} == {"lock", "order", "unique"}
    limited = admin_client.get(LIST, {"key": "stripe"})
    assert {t.rn for t in limited.context["cl"].result_list} == {"limit"}
    assert admin_client.get(LIST, {"key": "x" * 201}).status_code == 302  # a bad lookup


def test_the_task_page_shows_its_keys_and_why_it_waits(admin_client, worker):
    holder = Task.objects.submit("default", 1, rn="holder", locks=["invoice:7"])
    lease(worker)
    waiting = Task.objects.submit(
        "default",
        2,
        rn="waiting",
        locks=["invoice:7"],
        limits=["stripe"],
        rate_key="sms",
        order_key="customer:9",
        order_on_failure="continue",
    )
    html = admin_client.get(reverse("admin:scylla_django_task_change", args=[waiting.pk]))
    text = html.content.decode()
    assert "lock (exclusive)" in text and "invoice:7" in text
    assert "limit" in text and "stripe" in text and "rate" in text and "sms" in text
    assert "order key (on failure: continue)" in text and "customer:9" in text
    assert f"lock invoice:7 held by {holder.rn}" in text
    plain = Task.objects.submit("default", 3, rn="plain")
    page = admin_client.get(reverse("admin:scylla_django_task_change", args=[plain.pk]))
    assert "nothing: it may run now" in page.content.decode()


def aborted_for_good(worker) -> tuple[Task, Task]:
    Task.objects.submit("default", 1, rn="first", order_key="customer:9")
    second = Task.objects.submit("default", 2, rn="second", order_key="customer:9")
    [leased] = lease(worker)
    leased.abort(worker, [{"code": "boom", "args": {}, "description": ""}], retry=False)
    return leased, second


def test_the_task_page_releases_an_order_key(worker):
    operator = staff("view_task", "control_queue")
    first, second = aborted_for_good(worker)
    viewer = staff("view_task")
    page = reverse("admin:scylla_django_task_change", args=[first.pk])
    assert "scylla_release_order_url" in operator.get(page).context
    assert "scylla_release_order_url" not in viewer.get(page).context
    release = reverse("admin:scylla_django_task_release_order", args=[first.pk])
    assert viewer.post(release).status_code == 403
    response = operator.post(release, follow=True)
    assert "Order key customer:9 released: the tasks after first may run." in messages_of(response)
    assert typs(first)[-1] == "TaskOrderRelease"
    assert [t.pk for t in lease(worker)] == [second.pk]
    assert "scylla_release_order_url" not in operator.get(page).context
    again = operator.post(release, follow=True)
    assert any(m.startswith("Not released:") for m in messages_of(again))


def test_the_list_action_releases_order_keys(worker):
    operator = staff("view_task", "control_queue")
    first, second = aborted_for_good(worker)
    response = operator.post(
        LIST,
        {"action": "release_order_selected", "_selected_action": [first.pk, second.pk]},
        follow=True,
    )
    assert "1 order keys released, 1 skipped (holding none)." in messages_of(response)
    assert [t.pk for t in lease(worker)] == [second.pk]
    canceller = staff("view_task", "cancel_task")
    choices = dict(canceller.get(LIST).context["action_form"].fields["action"].choices)
    assert "cancel_selected" in choices and "release_order_selected" not in choices
