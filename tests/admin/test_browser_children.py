"""A task's parent and children on its admin page, in a real browser (see `test_browser`: run
when Debian's chromium and Playwright are installed, skipped otherwise). With
SCYLLA_SCREENSHOTS=1 it writes docs/admin-task-children.png."""

from __future__ import annotations

import pytest

from scylla_django.models import Outcome, Task, Worker
from tests.browser import CHROMIUM, screenshot
from tests.factories import running_task

sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
)


@pytest.fixture
def family(transactional_db, django_user_model, monkeypatch):
    """A superuser, and a completed "import-nov" that spawned three children on "rows"."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    django_user_model.objects.create_superuser("admin", "admin@example.com", "secret")
    worker = Worker.objects.register(["imports"], hostname="batch-1", pid=7)
    parent = running_task(worker, rn="import-nov", queue="imports", spec={"file": "nov.csv"})
    children = tuple(
        {"queue": "rows", "spec": {"rows": [n * 100, n * 100 + 99]}, "rn": f"rows-{n}"}
        | {"parent": "import-nov"}
        for n in range(3)
    )
    Task.objects.finish_many(
        worker, [Outcome(parent.pk, parent.leases, result={"rows": 300}, children=children)]
    )
    return parent


def test_a_tasks_page_links_its_parent_and_children(family, page, live_server):
    expect = sync_api.expect
    page.goto(f"{live_server.url}/admin/scylla_django/task/{family.pk}/change/")
    children = page.locator(".fieldBox.field-children_list ul.scylla-children li")
    expect(children).to_have_count(3)
    expect(children.first).to_contain_text("rows-0")
    expect(children.first.locator(".scylla-badge")).to_have_text("ready")
    expect(page.locator(".fieldBox.field-parent_link")).to_contain_text("-")
    screenshot(page, "task-children", full_page=True)

    # A child names its parent, linked back.
    children.nth(1).locator("a").click()
    expect(page.locator(".fieldBox.field-parent_link")).to_contain_text("import-nov")
    expect(page.locator(".fieldBox.field-parent_link .scylla-badge")).to_have_text("completed")
    page.locator(".fieldBox.field-parent_link a").click()
    expect(page.locator(".fieldBox.field-children_list")).to_contain_text("rows-2")

    # "All children": the task list filtered by parent.
    page.locator(".fieldBox.field-children_list a", has_text="all children").click()
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(3)
    assert "parent=import-nov" in page.url
