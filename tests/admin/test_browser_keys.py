"""The "Locks and limits" page and a task's keys in a real browser (Debian's chromium driven by
Playwright; skipped, saying why, without them). With SCYLLA_SCREENSHOTS=1 it writes
docs/admin-keys.png and docs/admin-task-keys.png."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections

from scylla_django.models import Hold, Task, Worker, keys

CHROMIUM = Path("/usr/bin/chromium")
DOCS = Path(__file__).resolve().parents[2] / "docs"

sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python")
pytestmark = [
    pytest.mark.keys,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]


def screenshot(page, name: str, full_page: bool = False) -> None:
    """Save a screenshot into docs/ when SCYLLA_SCREENSHOTS=1 (so test runs leave no files)."""
    if os.environ.get("SCYLLA_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS / f"admin-{name}.png"), full_page=full_page)


@pytest.fixture
def page(live_server):
    """A chromium page at 1280x800, logged in as the superuser of `keyed`."""
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
        sync_api.expect(page.locator("#user-tools")).to_contain_text("admin")
        yield page
        browser.close()
        # ORM calls made while Playwright's loop ran had connections of their own: close them.
        connections.close_all()


@pytest.fixture
def keyed(transactional_db, django_user_model, monkeypatch, settings):
    """A superuser; an invoice task running under lock invoice:7 and a slot of limit stripe,
    another waiting for both; a manual hold of lock nightly."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    settings.SCYLLA = {"LIMITS": {"stripe": 1}, "RATES": {"sms": "100/m"}}
    django_user_model.objects.create_superuser("admin", "admin@example.com", "secret")
    worker = Worker.objects.register(["invoices"], heartbeat_interval=30, lease_length=600)
    running = Task.objects.submit(
        "invoices", {"id": 7}, rn="invoice-7", locks=["invoice:7"], limits=["stripe"]
    )
    Task.objects.lease(worker, ["invoices"], lease_length=timedelta(minutes=10))
    waiting = Task.objects.submit(
        "invoices",
        {"id": 7, "again": True},
        rn="invoice-7-again",
        locks=["invoice:7", ("ledger", "shared")],
        limits=["stripe"],
        order_key="customer:9",
        rate_key="sms",
    )
    hold = keys.acquire_lock("nightly", ttl=None)
    return {"running": running, "waiting": waiting, "hold": hold}


def test_locks_and_limits_page_and_a_tasks_keys(keyed, page, live_server):
    expect = sync_api.expect
    page.goto(f"{live_server.url}/admin/scylla_django/task/")
    page.click(".object-tools >> text=Locks and limits")
    locks = page.locator("#scylla-locks tbody tr")
    expect(locks).to_have_count(2)
    expect(locks.first).to_contain_text("invoice:7")
    expect(locks.first).to_contain_text("task invoice-7")
    expect(locks.last).to_contain_text("nightly")
    expect(locks.last).to_contain_text(f"hold {keyed['hold']}")
    expect(locks.last).to_contain_text("until released")
    expect(page.locator("#scylla-limits tbody tr")).to_contain_text("1/1")
    expect(page.locator("#scylla-rates tbody tr")).to_contain_text("0/100")
    screenshot(page, "keys")

    # Force-release the manual hold: a message, and the row is gone.
    page.click(f"#scylla-release-hold-{keyed['hold']}")
    expect(page.locator(".messagelist")).to_contain_text(f"Hold {keyed['hold']} force-released.")
    expect(page.locator("#scylla-locks tbody tr")).to_have_count(1)
    assert not Hold.objects.exists()

    # The lock's link lists the tasks that name the key.
    page.locator("#scylla-locks a", has_text="invoice:7").click()
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)

    # The waiting task's page: its keys, each a link, and why it waits.
    page.locator("#result_list a", has_text="invoice-7-again").click()
    keys_field = page.locator(".fieldBox.field-keys_list")
    expect(keys_field).to_contain_text("lock (exclusive) invoice:7")
    expect(keys_field).to_contain_text("lock (shared) ledger")
    expect(keys_field).to_contain_text("limit stripe")
    expect(keys_field).to_contain_text("order key (on failure: block) customer:9")
    expect(keys_field).to_contain_text("rate sms")
    waiting = page.locator(".fieldBox.field-waiting_line")
    expect(waiting).to_contain_text("lock invoice:7 held by invoice-7")
    expect(waiting).to_contain_text("limit stripe full 1/1")
    screenshot(page, "task-keys", full_page=True)
    keys_field.locator("a", has_text="customer:9").click()
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
