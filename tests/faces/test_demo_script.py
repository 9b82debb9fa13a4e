"""`scripts/demo`, run for real: its children are stopped whatever ends it, a child that fails
makes it fail, and the demo tasks are submitted once. It runs the example project on a SQLite
file of its own, with the virtualenv running these tests.
"""

from __future__ import annotations

import os
import platform
import shutil
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

import django
import pytest

from tests.processes import ROOT


def _repeats_another_cell() -> bool:
    """The demo runs on a SQLite file of its own whatever DATABASE_URL says: it is run once per
    Django version, with the SQLite database (or with any, under Django 5.2, which CI runs on
    PostgreSQL only)."""
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    return django.VERSION >= (6, 0) and "sqlite" not in engine


pytestmark = [
    pytest.mark.skipif(
        subprocess.run(["which", "setsid"], capture_output=True).returncode != 0,
        reason="scripts/demo needs setsid (util-linux)",
    ),
    pytest.mark.skipif(
        _repeats_another_cell(), reason="the demo runs on SQLite: see the SQLite run"
    ),
]


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


def demo_env(tmp_path: Path, port: int) -> tuple[dict[str, str], str]:
    """The demo's environment (this virtualenv, a SQLite file in `tmp_path`, `port`) and the
    marker that finds its processes."""
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
    return env, marker


def start_demo(tmp_path: Path, port: int, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    env, marker = demo_env(tmp_path, port)
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


def wait_for_server(port: int, process: subprocess.Popen[bytes], log: Path | None = None) -> None:
    """Wait until the demo's web server answers; fail with its output if `process` ends."""
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            output = log.read_text() if log else process.stdout.read().decode()  # type: ignore[union-attr]
            pytest.fail(f"the demo ended: {output}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=2)
            return
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, "the web server never answered"
            time.sleep(0.3)


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
    says = f"demo: Python {platform.python_version()} ({sys.executable}), Django "
    assert f"{says}{django.get_version()}\n".encode() in output, output.decode()
    assert (b"django.tasks needs Django 6" in output) == (django.VERSION < (6, 0))
    assert wait_until_gone(marker) == [], output.decode()


def test_sigterm_stops_every_child_and_a_second_setup_submits_nothing(tmp_path):
    port = free_port()
    process, marker = start_demo(tmp_path, port)
    try:
        wait_for_server(port, process)
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


def find_python(path: str) -> str:
    """What the demo's find_python() answers with only `path` on PATH (so no pyenv either)."""
    function = subprocess.run(
        ["sed", "-n", "/^find_python()/,/^}/p", str(ROOT / "scripts" / "demo")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    done = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "-c", f"set -euo pipefail\n{function}\nfind_python"],
        env={"PATH": path},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def fake_python(directory: Path, name: str, works: bool = True) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\nexit {0 if works else 127}\n")
    path.chmod(0o755)
    return path


def test_the_demo_prefers_python_3_13_then_3_12_then_python3(tmp_path):
    bin_dir = tmp_path / "bin"
    assert find_python(str(bin_dir)) == "python3"
    twelve = fake_python(bin_dir, "python3.12")
    assert find_python(str(bin_dir)) == str(twelve)
    fake_python(bin_dir, "python3.13", works=False)  # a pyenv shim for a missing version
    assert find_python(str(bin_dir)) == str(twelve)
    thirteen = fake_python(bin_dir, "python3.13")
    assert find_python(str(bin_dir)) == str(thirteen)


def as_a_terminal_job() -> None:
    """In the child, before the shell starts: SIGINT at its default, as a terminal's
    foreground job has it. A test runner started in the background has it ignored, and a
    shell cannot trap a signal ignored when it started: the demo would never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_through_a_pipe_that_ends_stops_every_child(tmp_path):
    """`scripts/demo 2>&1 | tee demo.log`, then Ctrl-C: the terminal's SIGINT reaches the
    script and `tee` together, so the pipe is gone by the time the script stops its children;
    writing to it must not kill the script before they are stopped."""
    port = free_port()
    env, marker = demo_env(tmp_path, port)
    log = tmp_path / "demo.log"
    # The shell's own process group stands for the terminal's foreground job.
    shell = subprocess.Popen(
        ["bash", "-c", f'"{ROOT / "scripts" / "demo"}" 2>&1 | tee "{log}" >/dev/null'],
        env=env,
        start_new_session=True,
        preexec_fn=as_a_terminal_job,
    )
    try:
        wait_for_server(port, shell, log)
        children = processes_marked(marker)
        assert len(children) >= 4, children  # the script, the server, worker, monitor
        os.killpg(shell.pid, signal.SIGINT)
        shell.wait(timeout=60)
        left = wait_until_gone(marker, timeout=30)
        assert left == [], (left, log.read_text())
    finally:
        for pid in processes_marked(marker):
            os.kill(pid, signal.SIGKILL)
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
