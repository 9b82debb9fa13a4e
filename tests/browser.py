"""What the browser tests share: Debian's chromium, screenshots for the docs, and a logged-in
page (the `page` fixture of tests/admin/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.db import connections

CHROMIUM = Path("/usr/bin/chromium")
DOCS = Path(__file__).resolve().parents[1] / "docs"


def screenshot(page: Any, name: str, full_page: bool = False) -> None:
    """Save a screenshot into docs/ when SCYLLA_SCREENSHOTS=1 (so test runs leave no files)."""
    if os.environ.get("SCYLLA_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS / f"admin-{name}.png"), full_page=full_page)


def logged_in_page(sync_api: Any, url: str) -> Iterator[Any]:
    """A chromium page at 1280x800, in light mode, logged in to the admin at `url` as the
    superuser "admin" (password "secret")."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="light")
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{url}/admin/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "secret")
        page.click("input[type=submit]")
        sync_api.expect(page.locator("#scylla-console")).to_contain_text("Dashboard")
        yield page
        browser.close()
        # ORM calls made while Playwright's loop ran had connections of their own: close them.
        connections.close_all()
