"""The settings block of docs/howto/install.md builds a working project (`check`, `migrate`),
and its section "A first task" runs on it as written: the handler, the submission, the worker,
the result, then a worker and a monitor for good.

The blocks are read from the page itself (the ```python blocks that start with `# settings.py`
and `# urls.py`, and the blocks of the section "A first task"), so the page cannot drift from
what works. Each step is a real `manage.py` process on a database of its own, made for the test
and dropped after it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import django
import pytest
from django.conf import settings as django_settings

from tests.docs import ROOT, page, section

PAGE = page("howto/install.md")
BLOCK = re.compile(r"```python\n(# (settings|urls)\.py\n.*?)```", re.DOTALL)

BASE_SETTINGS = """\
SECRET_KEY = "docs-test"
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
    "myapp",
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


def documented_blocks() -> dict[str, str]:
    """The page's `# settings.py` and `# urls.py` blocks, by name."""
    found = {name: code for code, name in BLOCK.findall(PAGE.read_text())}
    assert set(found) == {"settings", "urls"}, f"{PAGE} lost its settings or urls block"
    return found


def quick_start() -> tuple[str, list[list[str]], list[list[str]]]:
    """The section "A first task": its handler file, the commands that run a first task, and
    the commands that run a worker and a monitor for good (each command split as a shell
    would, `python` standing for this interpreter)."""
    first_task = section(PAGE.read_text(), "## A first task")
    [handlers] = re.findall(r"```python\n(# myapp/handlers\.py .*?)```", first_task, re.DOTALL)
    blocks = [
        [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
        for block in re.findall(r"```sh\n(.*?)```", first_task, re.DOTALL)
    ]
    assert len(blocks) == 2, "the quick start lost its commands"
    for block in blocks:
        for command in block:
            assert command[:2] == ["python", "manage.py"], command
            command[0] = sys.executable
    return handlers, blocks[0], blocks[1]


def test_the_page_has_one_settings_block_with_each_feature():
    block = documented_blocks()["settings"]
    for needle in ("postgresql", "rest_framework", "ScyllaBackend", "SCHEDULES"):
        assert needle in block
    assert "metrics_view" in documented_blocks()["urls"]


@pytest.fixture
def database():
    """A database of its own on the test server, dropped afterwards."""
    import psycopg

    server = django_settings.DATABASES["default"]
    name = f"scylla_docs_{uuid.uuid4().hex[:8]}"
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
def test_a_project_from_the_page_runs_the_quick_start_as_written(tmp_path, database):
    blocks = documented_blocks()
    handlers, first_task, for_good = quick_start()
    own_database = textwrap.dedent(
        f"""
        # The test's own database on the test server; everything above is the page's.
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
    app = tmp_path / "myapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "handlers.py").write_text(handlers)
    (app / "tasks.py").write_text(TASKS)
    (tmp_path / "manage.py").write_text(MANAGE)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    }
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])

    def run(command: list[str]) -> str:
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    def manage(*args: str) -> str:
        return run([sys.executable, "manage.py", *args])

    checked = manage("check", "--fail-level", "WARNING")
    assert "System check identified no issues" in checked, checked
    manage("migrate", "-v", "0")

    # A first task: submit, one worker pass, show.
    outputs = [run(command) for command in first_task]
    shown = outputs[-1]
    assert re.search(r"^status +completed$", shown, re.MULTILINE), shown
    assert '"kind": "daily"' in shown and '"rn": "first-report"' in shown, shown

    scraped = manage(
        "shell",
        "-c",
        "from django.test import Client; r = Client().get('/metrics'); "
        "print(r.status_code, b'scylla_tasks' in r.content)",
    )
    assert "200 True" in scraped

    # For good: a worker of both queues and a monitor, until SIGTERM.
    worker, monitor = for_good
    assert worker[2:] == ["scylla_worker", "--queue", "default", "--queue", "reports"]
    result_id = None
    if django.VERSION < (6, 0):
        # django.tasks came with Django 6.0: the page says to leave `default` out.
        worker = worker[:3] + worker[5:]
    else:
        # The id on a line of its own: the log may warn that no live worker serves the queue.
        enqueued = manage(
            "shell", "-c", "from myapp.tasks import add; print('id', add.enqueue(2, 3).id)"
        )
        [result_id] = [line.split()[1] for line in enqueued.splitlines() if line.startswith("id ")]
    manage(
        "shell",
        "-c",
        "from scylla_django.models import Task; Task.objects.submit('reports', {'kind': 'weekly'}, "
        "rn='second-report')",
    )
    running = [
        subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for command in (worker, monitor)
    ]
    try:
        wait_for_rows(
            database,
            "SELECT count(*) FROM scylla_django_task WHERE status = 'completed'",
            3 if result_id else 2,
            running,
        )
        wait_for_rows(
            database,
            "SELECT count(*) FROM scylla_django_monitor WHERE last_pass IS NOT NULL",
            1,
            running,
        )
    finally:
        for process in running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        outputs = [process.communicate(timeout=120)[0].decode() for process in running]
    assert [process.returncode for process in running] == [0, 0], outputs
    if result_id:
        assert "SUCCESSFUL 5" in manage(
            "shell",
            "-c",
            f"from myapp.tasks import add; r = add.get_result({result_id!r}); "
            "print(r.status, r.return_value)",
        )


def wait_for_rows(
    database: dict[str, object], query: str, count: int, running: list[subprocess.Popen[bytes]]
) -> None:
    """Wait until `query` counts `count`, while every process of `running` still runs."""
    import psycopg

    deadline = time.monotonic() + 120
    with psycopg.connect(**database) as connection:
        while True:
            [(found,)] = connection.execute(query).fetchall()
            if found >= count:
                return
            ended = [p.args for p in running if p.poll() is not None]
            assert not ended, f"ended early: {ended}"
            assert time.monotonic() < deadline, f"{query}: {found}, not {count}"
            time.sleep(0.2)
