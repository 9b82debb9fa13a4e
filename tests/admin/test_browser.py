"""The admin console end to end in a real browser: Debian's chromium driven by Playwright.

Runs against pytest-django's live server when /usr/bin/chromium and Playwright for Python are
installed, and is skipped (saying why) otherwise. With SCYLLA_SCREENSHOTS=1 it also writes the
screenshots shown in the README: docs/admin-task-list.png, -task-detail.png, -dashboard.png,
-reset-lease.png.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections
from django.db.models.functions import Now

from scylla_django.batches import Batch
from scylla_django.enums import Status
from scylla_django.models import Task, Worker
from scylla_django.models.serving import forget_live_worker_queues
from tests.factories import TaskFactory, running_task

CHROMIUM = Path("/usr/bin/chromium")
DOCS = Path(__file__).resolve().parents[2] / "docs"

sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
)


def screenshot(page, name: str, full_page: bool = False) -> None:
    """Save a screenshot into docs/ when SCYLLA_SCREENSHOTS=1 (so test runs leave no files)."""
    if os.environ.get("SCYLLA_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS / f"admin-{name}.png"), full_page=full_page)


@pytest.fixture
def console(transactional_db, django_user_model, monkeypatch):
    """A superuser, three workers and tasks in every state over three queues.

    Three terminal tasks were last updated 30 days ago; "report-nov" is running.
    """
    # Playwright's sync API keeps an event loop in this thread; the ORM calls made between
    # browser steps are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    django_user_model.objects.create_superuser("admin", "admin@example.com", "secret")
    # Live workers heartbeat every 30 s (the test takes longer than the default's silence).
    mail = Worker.objects.register(
        ["emails", "images"],
        capacity=8,
        hostname="web-1",
        pid=4242,
        heartbeat_interval=30,
        lease_length=600,
    )
    batch = Worker.objects.register(
        ["reports"],
        capacity=2,
        hostname="batch-1",
        pid=77,
        heartbeat_interval=30,
        lease_length=600,
    )
    Worker.objects.register(["emails"], hostname="web-2", pid=99).stop()
    # A worker killed mid-task: not seen since, its lease still runs for minutes.
    crashed = Worker.objects.register(["invoices"], capacity=2, hostname="batch-2", pid=313)

    for n in range(36):  # finished over the last hour, for the chart
        worker, queue = (mail, "emails") if n % 3 else (mail, "images")
        task = running_task(worker, rn=f"job-{n:03d}", queue=queue, spec={"n": n})
        if n % 9 == 4:
            task.abort(
                worker,
                [{"code": "smtp_timeout", "args": {"n": n}, "description": "SMTP timed out"}],
            )
        else:
            task.complete(worker, {"sent": 1})
        Task.objects.filter(pk=task.pk).update(updated=Now() - timedelta(minutes=(n * 7) % 58))
    for n, status in enumerate([Status.COMPLETED, Status.ABORTED, Status.CANCELLED]):
        task = running_task(mail, rn=f"old-{n}", queue="emails")
        if status == Status.COMPLETED:
            task.complete(mail)
        elif status == Status.ABORTED:
            task.abort(mail, [{"code": "bounce", "args": {}, "description": "mailbox full"}])
        else:
            task.cancel()
    # The old abort was given up (a dead letter, which the bulk purge keeps): let it go.
    assert Task.objects.filter(rn__startswith="old-").discard() == 1
    Task.objects.filter(rn__startswith="old-").update(updated=Now() - timedelta(days=30))

    report = running_task(
        batch,
        rn="report-nov",
        queue="reports",
        priority=200,
        lease_length=600,
        spec={
            "report": "revenue",
            "period": {"from": "2026-11-01", "to": "2026-11-30"},
            "format": "pdf",
            "recipients": ["finance@example.com", "ops@example.com"],
        },
    )
    report.heartbeat(batch, progress=0.42, lease_length=600)
    for n in range(3):
        thumb = running_task(mail, rn=f"image-{n}", queue="images", lease_length=600)
        thumb.heartbeat(mail, progress=0.25 * (n + 1), lease_length=600)
    stuck = running_task(mail, rn="stuck-email", queue="emails")
    Task.objects.filter(pk=stuck.pk).update(deadline=Now() - timedelta(minutes=3))
    for n in range(6):
        TaskFactory(rn=f"welcome-{n}", queue="emails", priority=50 * (n % 3))
    running_task(crashed, rn="invoice-7", queue="invoices", lease_length=600)
    Worker.objects.filter(pk=crashed.pk).update(
        last_seen=Now() - timedelta(minutes=6),
        silent_at=Now() - timedelta(minutes=5),
        dead_at=Now() - timedelta(minutes=1),
    )
    return {"report": report, "mail": mail, "crashed": crashed}


@pytest.fixture
def page(live_server):
    """A logged-in chromium page at 1280x800, in light mode."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="light")
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{live_server.url}/admin/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "secret")
        page.click("input[type=submit]")
        sync_api.expect(page.locator("#scylla-console")).to_contain_text("Dashboard")
        yield page
        browser.close()
        # ORM calls made while Playwright's loop ran had connections of their own: close them.
        connections.close_all()


def test_operator_session(console, page, live_server):
    expect = sync_api.expect
    # The task list, with the navigation sidebar folded away.
    page.click("#scylla-console >> text=Dashboard")
    page.click(".object-tools >> text=Tasks")
    page.wait_for_url("**/admin/scylla_django/task/")
    page.click("#toggle-nav-sidebar")
    page.evaluate("window.scrollTo(0, 0)")
    expect(page.locator("#result_list")).to_contain_text("report-nov")
    expect(page.locator("#result_list .scylla-badge.scylla-expired")).to_have_count(1)
    screenshot(page, "task-list")

    # Find the running report by filter, and cancel it.
    page.click("#changelist-filter >> a:text-is('Running')")
    page.fill("#changelist-filter input[name=queue]", "reports")
    page.press("#changelist-filter input[name=queue]", "Enter")
    row = page.locator("#result_list tbody tr", has_text="report-nov")
    expect(row).to_have_count(1)
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    assert "status=running" in page.url and "queue=reports" in page.url
    expect(row.locator(".scylla-badge")).to_have_text("running")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "cancel_selected")
    page.click(".actions button[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text("1 cancelled, 0 skipped")
    expect(page.locator("#result_list tbody tr", has_text="report-nov")).to_have_count(0)
    assert Task.objects.get(rn="report-nov").status == Status.CANCELLED

    # Its status changed, and its history says so.
    page.click("#changelist-filter-extra-actions >> text=Clear all filters")
    page.fill("#searchbar", "report-nov")
    page.press("#searchbar", "Enter")
    row = page.locator("#result_list tbody tr", has_text="report-nov")
    expect(row.locator(".scylla-badge")).to_have_text("cancelled")
    row.locator("a", has_text="report-nov").click()
    expect(page.locator(".field-status_badge .scylla-badge")).to_have_text("cancelled")
    expect(page.locator(".field-spec_json pre")).to_contain_text('"recipients": [')
    history = page.locator(".inline-related tbody tr.form-row")
    expect(history.first).to_contain_text("Cancellation")
    expect(history.last).to_contain_text("Assignment")
    screenshot(page, "task-detail", full_page=True)

    # A bulk purge through its confirmation page.
    page.goto(f"{live_server.url}/admin/scylla_django/task/")
    page.click(".object-tools >> text=Bulk purge")
    page.fill("input[name=older_than_days]", "10")
    page.click("#scylla-purge-form input[type=submit]")
    expect(page.locator("#scylla-purge-confirm")).to_contain_text("This deletes 3 tasks")
    page.click("#scylla-purge-confirm input[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text("Purged 3 tasks.")
    assert not Task.objects.filter(rn__startswith="old-").exists()
    assert Task.objects.filter(rn__startswith="job-").count() == 36

    # "Purge selected" asks first, with a count; going back deletes nothing.
    page.fill("#searchbar", "job-001")
    page.press("#searchbar", "Enter")
    for confirm in (False, True):
        page.locator("#result_list tbody tr", has_text="job-001").locator(
            "input.action-select"
        ).check()
        page.select_option("select[name=action]", "purge_selected")
        page.click(".actions button[type=submit]")
        expect(page.locator("#scylla-purge-selected")).to_contain_text(
            "This deletes 1 selected task, with its history."
        )
        if not confirm:
            page.click("#scylla-purge-selected >> text=No, take me back")
            expect(page.locator("#result_list tbody tr", has_text="job-001")).to_have_count(1)
            assert Task.objects.filter(rn="job-001").exists()
    page.click("#scylla-purge-selected input[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text("1 purged, 0 skipped")
    assert not Task.objects.filter(rn="job-001").exists()
    assert Task.objects.filter(rn__startswith="job-").count() == 35

    # The dashboard.
    page.click(".object-tools >> text=Dashboard")
    page.goto(f"{page.url.split('?')[0]}?refresh=0")  # no reload between the steps below
    queues = page.locator("#scylla-queues tbody tr")
    expect(queues).to_have_count(4)
    expect(queues.filter(has_text="reports")).to_contain_text("1")
    expect(page.locator("#scylla-expired")).to_contain_text("stuck-email")
    expect(page.locator("#scylla-monitor-missing")).to_contain_text("No monitor is running")
    workers = page.locator("#scylla-workers")
    expect(workers.locator("h2")).to_contain_text("2 alive")
    expect(workers.locator("h2")).to_contain_text("1 dead")
    expect(workers).to_contain_text("web-1:4242")
    # The dead worker still holds its invoice: the dashboard says so.
    dead = workers.locator("tr.scylla-worker-dead")
    expect(dead).to_contain_text("batch-2:313")
    expect(dead).to_contain_text("invoice-7")
    expect(page.locator("#scylla-workers-gone")).to_contain_text("not alive still holds tasks")
    expect(page.locator("#scylla-throughput rect")).not_to_have_count(0)
    expect(page.locator("#scylla-failures")).to_contain_text("smtp_timeout")
    group = page.locator("#scylla-failure-groups tbody tr", has_text="smtp_timeout")
    expect(group).to_contain_text("emails")
    expect(group.locator("td.scylla-num")).to_have_text("4")
    screenshot(page, "dashboard", full_page=True)

    # Three per-queue charts; the range selector switches them to the last day and back.
    charts = page.locator("#scylla-charts")
    for chart in ("throughput", "failures", "wait"):
        expect(charts.locator(f"#scylla-chart-{chart} svg")).to_have_count(1)
    expect(charts.locator("#scylla-chart-throughput polyline")).not_to_have_count(0)
    expect(charts.locator("#scylla-chart-throughput .scylla-legend")).to_contain_text("emails")
    expect(charts.locator("#scylla-chart-failures .scylla-legend")).to_contain_text("emails")
    expect(charts.locator("#scylla-chart-wait polyline.scylla-dashed")).not_to_have_count(0)
    charts.locator("a[data-range=day]").click()
    assert "range=day" in page.url
    expect(charts.locator("h2").first).to_contain_text("Per queue: last day")
    expect(charts.locator(".scylla-ranges strong")).to_have_text("Last day")
    expect(charts.locator("#scylla-chart-throughput .scylla-legend")).to_contain_text("emails")
    charts.locator("a[data-range=hour]").click()
    expect(charts.locator(".scylla-ranges strong")).to_have_text("Last hour")

    # The failures group links to its tasks.
    group.locator("td.scylla-num a").click()
    assert "error_code=smtp_timeout" in page.url and "status=aborted" in page.url
    expect(page.locator("#result_list tbody tr")).to_have_count(4)
    expect(page.locator("#result_list .field-error_code").first).to_have_text("smtp_timeout")

    # Pause the emails queue: nothing of it is leased until it is resumed.
    page.click(".object-tools >> text=Dashboard")
    emails = page.locator("#scylla-queues tbody tr", has_text="emails")
    emails.locator("button", has_text="Pause").click()
    expect(page.locator(".messagelist")).to_contain_text("Queue emails paused")
    expect(emails.locator(".scylla-badge.scylla-paused")).to_have_count(1)
    mail = console["mail"]
    assert Task.objects.lease(mail, ["emails"]) == []
    Task.objects.submit("emails", {}, rn="welcome-late")  # still accepted
    emails.locator("button", has_text="Resume").click()
    expect(page.locator(".messagelist")).to_contain_text("Queue emails resumed")
    expect(emails.locator(".scylla-badge.scylla-paused")).to_have_count(0)
    assert len(Task.objects.lease(mail, ["emails"])) == 1

    # Reset the dead worker's lease now, from the task page.
    page.locator("#scylla-workers tr.scylla-worker-dead a", has_text="invoice-7").click()
    expect(page.locator(".field-status_badge .scylla-badge")).to_have_text("running")
    reset = page.locator("#scylla-reset-lease button")
    expect(reset).to_have_text("Reset lease now")
    screenshot(page, "reset-lease")
    reset.click()
    expect(page.locator(".messagelist")).to_contain_text("Lease reset: invoice-7 is ready again")
    expect(page.locator(".field-status_badge .scylla-badge")).to_have_text("ready")
    expect(page.locator("#scylla-reset-lease")).to_have_count(0)
    expect(page.locator(".inline-related tbody tr.form-row").first).to_contain_text("Timeout")
    invoice = Task.objects.get(rn="invoice-7")
    assert (invoice.status, invoice.owner) == (Status.READY, None)

    # A task's page by its rn, as the API and the logs name it; an unknown one is a message.
    page.goto(f"{live_server.url}/admin/scylla_django/task/invoice-7/change/")
    assert page.url.endswith(f"/admin/scylla_django/task/{invoice.pk}/change/")
    expect(page.locator(".fieldBox.field-rn")).to_contain_text("invoice-7")
    page.goto(f"{live_server.url}/admin/scylla_django/task/no-such-task/change/")
    assert page.url.endswith("/admin/scylla_django/task/")
    expect(page.locator(".messagelist")).to_contain_text("No task has the id or rn “no-such-task”")

    # A follow-up says what it waits for, and links to each parent.
    Task.objects.submit("invoices", {}, rn="invoice-7-mail", after=["job-000", "invoice-7"])
    page.goto(f"{live_server.url}/admin/scylla_django/task/invoice-7-mail/change/")
    expect(page.locator(".fieldBox.field-status_badge")).to_contain_text("waiting for parents")
    expect(page.locator(".fieldBox.field-not_before_at")).to_contain_text("waiting for parents")
    expect(page.locator("body")).not_to_contain_text("9999")
    parents = page.locator(".field-parents_list li")
    expect(parents).to_have_count(2)
    expect(parents.first).to_contain_text("job-000 completed")
    expect(parents.last).to_contain_text("invoice-7 ready")
    parents.last.locator("a").click()
    expect(page.locator(".fieldBox.field-rn")).to_contain_text("invoice-7")

    # Dark mode: the badges take the dark palette.
    page.goto(f"{live_server.url}/admin/scylla_django/task/dashboard/?refresh=0")
    badge = page.locator("#scylla-queues thead .scylla-ready")
    light = badge.evaluate("element => getComputedStyle(element).backgroundColor")
    page.emulate_media(color_scheme="dark")
    dark = badge.evaluate("element => getComputedStyle(element).backgroundColor")
    assert light == "rgb(224, 239, 255)"
    assert dark == "rgb(23, 58, 94)"


@pytest.fixture
def batches(transactional_db, django_user_model, monkeypatch):
    """A superuser; a batch of 12 image resizes, 7 completed and 2 dead; a dead invoice."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    django_user_model.objects.create_superuser("admin", "admin@example.com", "secret")
    worker = Worker.objects.register(
        ["images", "reports", "invoices"],
        capacity=8,
        hostname="web-1",
        pid=4242,
        heartbeat_interval=30,
        lease_length=600,
    )
    forget_live_worker_queues()  # the worker above serves the callbacks' queue
    with Batch(
        on_success=("reports", {"album": "holidays"}),
        on_failure=("reports", {"album": "holidays", "alert": True}),
    ) as batch:
        for n in range(12):
            batch.submit("images", {"image": f"holidays/{n:03d}.jpg"}, rn=f"resize-{n:03d}")
    for task in Task.objects.lease(worker, ["images"], limit=9):
        if task.rn in ("resize-003", "resize-007"):
            task.abort(worker, [{"code": "corrupt_image", "args": {}, "description": "bad JPEG"}])
        else:
            task.complete(worker, {"width": 640})
    invoice = running_task(worker, rn="invoice-42", queue="invoices")
    invoice.abort(worker, [{"code": "card_declined", "args": {}, "description": "declined"}])
    assert batch.row is not None
    return batch.row


def test_batch_page_and_dead_letters(batches, page, live_server):
    expect = sync_api.expect
    page.goto(f"{live_server.url}/admin/scylla_django/batch/")
    row = page.locator("#result_list tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator(".scylla-batch-done")).to_have_text("9 / 12")
    row.locator("th a").click()
    expect(page.locator(".scylla-callback")).to_have_count(2)
    expect(page.locator("body")).to_contain_text("(held)")
    screenshot(page, "batch", full_page=True)

    # The batch's dead letters, from its page; then every dead letter, from the dashboard.
    page.click("text=dead letters")
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    page.goto(f"{live_server.url}/admin/scylla_django/task/dashboard/")
    expect(page.locator("#scylla-dead-count")).to_have_text("3")
    page.click("#scylla-dead-count")
    expect(page.locator("#result_list tbody tr")).to_have_count(3)
    page.click("#toggle-nav-sidebar")
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "dead-letters")

    # Discard the invoice: it stays aborted, no longer a dead letter.
    page.locator("#result_list tbody tr", has_text="invoice-42").locator(
        "input.action-select"
    ).check()
    page.select_option("select[name=action]", "discard_selected")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("1 discarded, 0 skipped")
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    assert Task.objects.get(rn="invoice-42").dead is None
