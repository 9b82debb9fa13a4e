"""Running management commands as real processes against the test database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    """A DATABASE_URL for the test database pytest-django created (for child processes).

    For SQLite it is the test database file itself: only the TEST dict of tests/settings.py
    adds ".test", and a child does not create a test database.
    """
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return "sqlite:///" + os.path.abspath(str(settings["NAME"]))
    scheme = {"postgresql": "postgres", "mysql": "mysql"}[connection.vendor]
    user = quote(settings["USER"] or "", safe="")
    if settings["PASSWORD"]:
        user += ":" + quote(settings["PASSWORD"], safe="")
    host = settings["HOST"] or "localhost"
    port = f":{settings['PORT']}" if settings["PORT"] else ""
    return f"{scheme}://{user}@{host}{port}/{quote(settings['NAME'], safe='')}"


def child_env() -> dict[str, str]:
    """The environment of a child process: the test settings and the test database."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
    }


def start(*args: str, **popen) -> subprocess.Popen:
    """Start `manage.py <args>` with the test settings and database."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def wait_until(predicate: Callable[[], object], timeout: float = 20, what: str = "") -> None:
    """Poll `predicate` until it is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def finish(process: subprocess.Popen, timeout: float = 20) -> tuple[int, str]:
    """Wait for the process; return its exit code and output (killing it if it hangs)."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"process did not exit in {timeout}s; output:\n{output}") from None
    return process.returncode, output
