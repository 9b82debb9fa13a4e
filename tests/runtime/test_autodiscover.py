"""Handlers are registered when Django starts: `registry.get(queue)` answers in any process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scylla_django import handlers
from scylla_django.checks import check_settings
from scylla_django.handlers import handler_registry
from tests.processes import ROOT


def test_a_shell_sees_the_handlers_without_importing_them(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from scylla_django.handlers import registry; "
            "print(registry.get('reports').__module__)",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "example_project.demo.handlers"


def test_the_handler_modules_setting_names_the_modules(settings, monkeypatch):
    imported: list[tuple[str, ...]] = []
    monkeypatch.setattr(
        handler_registry, "autodiscover_modules", lambda *names: imported.append(names)
    )
    handlers.autodiscover()
    settings.SCYLLA = {"HANDLER_MODULES": ["handlers", "jobs.scylla"]}
    handlers.autodiscover()
    assert imported == [("handlers",), ("handlers", "jobs.scylla")]


@pytest.mark.parametrize("bad", ["handlers", ["no such module"], [3]])
def test_a_bad_handler_modules_setting_is_a_system_check_error(settings, bad):
    settings.SCYLLA = {"HANDLER_MODULES": bad}
    [error] = check_settings()
    assert error.id == "scylla_django.E001" and "HANDLER_MODULES" in error.msg
