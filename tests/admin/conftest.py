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
