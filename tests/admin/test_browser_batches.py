"""The batch pages and the dead-letter list in a real browser (Debian's chromium driven by
Playwright; skipped, saying why, without them). With SCYLLA_SCREENSHOTS=1 it writes
docs/admin-batch.png and docs/admin-dead-letters.png."""

from __future__ import annotations

import pytest

from scylla_django.batches import Batch
from scylla_django.models import Task, Worker
from scylla_django.models.serving import forget_live_worker_queues
from tests.browser import CHROMIUM, screenshot
from tests.factories import running_task

sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
)


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


CONTRAST = """([text, behind]) => {
    const rgb = (css) => css.match(/[\\d.]+/g).slice(0, 3).map(Number);
    const luminance = (css) => {
        const [r, g, b] = rgb(css).map((c) => {
            c /= 255;
            return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
        });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const fg = luminance(getComputedStyle(document.querySelector(text)).color);
    const bg = luminance(getComputedStyle(document.querySelector(behind)).backgroundColor);
    return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
}"""


def contrast(page, text: str, behind: str) -> float:
    """The WCAG contrast ratio of `text`'s colour on `behind`'s background (4.5: AA)."""
    return float(page.evaluate(CONTRAST, [text, behind]))


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
    # The count is a link on the module's coloured header: it must stand out from it.
    assert contrast(page, "#scylla-dead-count", "#scylla-dead h2") >= 4.5
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
