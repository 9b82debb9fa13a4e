"""The reference pages' generated tables (scripts/docs_reference.py, the MkDocs hook) are made
from the code as it is: every marker a page holds names a table, and each table says what the
code has (every setting, every check id, every command, every API route)."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

import pytest
from django.core.management import get_commands

from scylla_django import conf
from tests.docs import DOCS, ROOT


def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_reference", ROOT / "scripts" / "docs_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = reference()
PAGES = sorted(p for p in DOCS.rglob("*.md") if REFERENCE.MARKER.search(p.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_every_marker_of_the_page_is_replaced_by_its_table(page):
    rendered = REFERENCE.render(page.read_text())
    assert not REFERENCE.MARKER.search(rendered)
    assert len(rendered) > len(page.read_text())


def test_the_settings_table_has_every_setting_with_its_default():
    table = REFERENCE.settings()
    for name in conf.DEFAULTS:
        assert re.search(rf"^\| `{name}` \| .+ \| .+ \|$", table, re.M), name
    assert "| `LEASE_LENGTH` | 10 s |" in table


def test_the_checks_page_names_every_check_id_written_in_the_package():
    page = REFERENCE.checks()
    written = set(
        re.findall(r"""\bid=["'](scylla_django\.[EW]\d{3})["']""", REFERENCE.package_source())
    )
    assert written
    for check_id in written:
        assert f"`{check_id}`" in page, check_id


def test_the_commands_page_has_each_command_s_options():
    page = REFERENCE.commands()
    ours = [name for name, app in get_commands().items() if app == "scylla_django"]
    assert "scylla_worker" in ours
    for name in ours:
        assert f"## `{name}`" in page and f"usage: manage.py {name}" in page, name
    assert "--lease-length" in page and "### `scylla_queue pause`" in page


def test_the_api_page_lists_every_route_of_the_schema():
    schema = REFERENCE.api_schema()
    page = REFERENCE.api()
    for path, item in schema["paths"].items():
        for method in REFERENCE.METHODS:
            if method in item:
                assert f"### `{method.upper()} {path}`" in page, (method, path)
    assert "### `POST /tasks/`" in page and "### Task\n" in page


def test_the_task_page_has_the_transitions_table():
    table = REFERENCE.transitions()
    assert "| `cancel` | `ready`, `running` | `cancelled` | `TaskCancellation` | no |" in table
