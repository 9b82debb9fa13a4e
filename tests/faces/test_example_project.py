"""The example project's home page, from the top-level templates/ directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import clear_url_caches

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def example_urls(settings):
    settings.ROOT_URLCONF = "example_project.urls"
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [ROOT / "templates"]}]
    clear_url_caches()
    yield
    clear_url_caches()


@pytest.mark.django_db
def test_home_page_links_the_admin_dashboard_and_api_docs(client, example_urls):
    html = client.get("/").content.decode()
    assert 'href="/admin/"' in html
    assert 'href="/admin/scylla_django/task/dashboard/"' in html
    assert 'href="/api/docs/"' in html
    assert "drf_create_token" in html
