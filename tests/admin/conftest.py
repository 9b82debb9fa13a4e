"""What the admin tests share."""

from __future__ import annotations

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def empty_cache():
    """The dashboard's charts keep closed intervals in the cache: each test starts without."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def page(live_server):
    """A logged-in chromium page at 1280x800, in light mode (tests/browser.py)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python")
    from tests.browser import logged_in_page

    yield from logged_in_page(sync_api, live_server.url)
