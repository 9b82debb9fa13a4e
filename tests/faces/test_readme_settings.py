"""The README's settings block builds a working project: `check`, `migrate`, a task run.

The blocks are read from README.md itself (the ```python blocks that start with `# settings.py`
and `# urls.py`), so the README cannot drift from what works. Each step is a real
`manage.py` process on a database of its own, made for the test and dropped after it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import django
import pytest
from django.conf import settings as django_settings

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(# (settings|urls)\.py\n.*?)```", re.DOTALL)

BASE_SETTINGS = """\
SECRET_KEY = "readme-test"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "site_urls"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "readme_app",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
STATIC_URL = "static/"
"""

BASE_URLS = """\
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""

HANDLERS = """\
from scylla_django import handler


@handler("reports")
def report(ctx):
    return {"kind": ctx.spec["kind"]}
"""

TASKS = """\
from django.tasks import task


@task
def add(a, b):
    return a + b
"""

MANAGE = """\
import os
import sys

from django.core.management import execute_from_command_line

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")
execute_from_command_line(sys.argv)
"""


def readme_blocks() -> dict[str, str]:
    """The README's `# settings.py` and `# urls.py` blocks, by name."""
    found = {name: code for code, name in BLOCK.findall((ROOT / "README.md").read_text())}
    assert set(found) == {"settings", "urls"}, "README.md lost its settings or urls block"
    return found


def test_the_readme_has_one_settings_block_with_each_feature():
    block = readme_blocks()["settings"]
    for needle in ("postgresql", "rest_framework", "ScyllaBackend", "SCHEDULES"):
        assert needle in block
    assert "metrics_view" in readme_blocks()["urls"]


@pytest.fixture
def database():
    """A database of its own on the test server, dropped afterwards."""
    import psycopg

    server = django_settings.DATABASES["default"]
    name = f"scylla_readme_{uuid.uuid4().hex[:8]}"
    params = {
        "host": server.get("HOST") or "127.0.0.1",
        "port": server.get("PORT") or 5432,
        "user": server.get("USER") or "postgres",
        "password": server.get("PASSWORD") or None,
        "dbname": "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**params) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield {**params, "dbname": name}
    with psycopg.connect(**params) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_a_project_from_the_readme_block_checks_migrates_and_runs_a_task(tmp_path, database):
    blocks = readme_blocks()
    own_database = textwrap.dedent(
        f"""
        # The test's own database on the test server; everything above is the README's.
        DATABASES["default"].update(
            NAME={database["dbname"]!r},
            USER={database["user"]!r},
            PASSWORD={database["password"] or ""!r},
            HOST={database["host"]!r},
            PORT={str(database["port"])!r},
        )
        """
    )
    (tmp_path / "site_settings.py").write_text(
        BASE_SETTINGS + "\n" + blocks["settings"] + own_database
    )
    (tmp_path / "site_urls.py").write_text(BASE_URLS + "\n" + blocks["urls"])
    app = tmp_path / "readme_app"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "handlers.py").write_text(HANDLERS)
    (app / "tasks.py").write_text(TASKS)
    (tmp_path / "manage.py").write_text(MANAGE)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    }
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    checked = manage("check", "--fail-level", "WARNING")
    assert "System check identified no issues" in checked, checked
    manage("migrate", "-v", "0")
    manage(
        "shell",
        "-c",
        "from scylla_django.models import Task; Task.objects.submit('reports', {'kind': 'daily'}, "
        "rn='r1')",
    )
    manage("scylla_worker", "--queue", "reports", "--once", "-v", "0")
    assert "completed {'kind': 'daily'}" in manage(
        "shell",
        "-c",
        "from scylla_django.models import Task; t = Task.objects.get(rn='r1'); "
        "print(t.status, t.result)",
    )
    scraped = manage(
        "shell",
        "-c",
        "from django.test import Client; r = Client().get('/metrics'); "
        "print(r.status_code, b'scylla_tasks' in r.content)",
    )
    assert "200 True" in scraped
    if django.VERSION < (6, 0):
        return  # django.tasks came with Django 6.0: the TASKS setting is ignored before it
    # The id on a line of its own: the log may warn that no live worker serves the queue yet.
    enqueued = manage(
        "shell", "-c", "from readme_app.tasks import add; print('id', add.enqueue(2, 3).id)"
    )
    [result_id] = [line.split()[1] for line in enqueued.splitlines() if line.startswith("id ")]
    manage("scylla_worker", "--queue", "default", "--once", "-v", "0")
    assert "SUCCESSFUL 5" in manage(
        "shell",
        "-c",
        f"from readme_app.tasks import add; r = add.get_result({result_id!r}); "
        "print(r.status, r.return_value)",
    )
