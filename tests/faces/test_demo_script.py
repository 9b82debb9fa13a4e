"""`scripts/demo`, run for real: its children are stopped whatever ends it, a child that fails
makes it fail, and the demo tasks are submitted once. It runs the example project on a SQLite
file of its own, with the virtualenv running these tests.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "setsid"], capture_output=True).returncode != 0,
    reason="scripts/demo needs setsid (util-linux)",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def processes_marked(marker: str) -> list[int]:
    """PIDs of the live processes whose environment holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def start_demo(tmp_path: Path, port: int, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    marker = f"SCYLLA_DEMO_TEST={uuid.uuid4()}"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    }
    env.update(
        PORT=str(port),
        VENV=str(Path(sys.executable).parent.parent),
        DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        SCYLLA_DEMO_TEST=marker.split("=", 1)[1],
    )
    process = subprocess.Popen(
        [str(ROOT / "scripts" / "demo"), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return process, marker


def wait_until_gone(marker: str, timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := processes_marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def demo_tasks(tmp_path: Path) -> int:
    with sqlite3.connect(tmp_path / "demo.sqlite3") as db:
        return int(db.execute("SELECT COUNT(*) FROM scylla_django_task").fetchone()[0])


def test_a_port_in_use_fails_the_script_and_leaves_no_process(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        process, marker = start_demo(tmp_path, busy.getsockname()[1])
        output, _ = process.communicate(timeout=180)
    assert process.returncode != 0, output.decode()
    assert b"already in use" in output
    assert wait_until_gone(marker) == [], output.decode()


def test_sigterm_stops_every_child_and_a_second_setup_submits_nothing(tmp_path):
    port = free_port()
    process, marker = start_demo(tmp_path, port)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, process.stdout.read().decode()  # type: ignore[union-attr]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the web server never answered"
                time.sleep(0.3)
        assert len(processes_marked(marker)) >= 4  # the script, the server, worker, monitor
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output.decode()
    assert wait_until_gone(marker) == [], output.decode()
    submitted = demo_tasks(tmp_path)
    assert submitted == 30

    again, _ = start_demo(tmp_path, port, "--setup-only")
    output, _ = again.communicate(timeout=180)
    assert again.returncode == 0, output.decode()
    assert b"Submitted 0 demo tasks" in output
    assert demo_tasks(tmp_path) == submitted
