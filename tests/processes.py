"""Running management commands as real processes against the test database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent

#: Every process `start()` made, so that one a failing test left running is stopped after it.
_started: list[subprocess.Popen] = []


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


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `manage.py <args>` with the test settings and database (`env` adds to them).

    Its output goes to a temporary file that `finish()` reads, not to a pipe: a pipe nobody
    reads fills up (64 KiB, a few hundred log lines at -v 2) and then blocks the child's
    logging, and with it whichever of its threads logs next.
    """
    output = tempfile.TemporaryFile("w+")  # noqa: SIM115 (finish() closes it)
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env={**child_env(), **(env or {})},
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
    )
    process.output = output  # type: ignore[attr-defined]
    _started.append(process)
    return process


def stop_leftovers() -> list[int]:
    """Kill, by pid, each process of `start()` still running and every process it started
    (a test that failed before its `finish()` would leave them leasing from the test
    database); return the pids killed."""
    killed = []
    while _started:
        process = _started.pop()
        if process.poll() is None:
            family = [process.pid, *descendants(process.pid)]
            signal_each(family, signal.SIGKILL)
            process.wait()
            killed.extend(family)
    return killed


def wait_until(predicate: Callable[[], object], timeout: float = 60, what: str = "") -> None:
    """Poll `predicate` until it is true; fail the test after `timeout` seconds (a minute by
    default: a process starting on a machine whose cores are busy may take tens of seconds,
    and a wait that succeeds costs no more for it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what or predicate}{_outputs_so_far()}"
    )


#: How much of each process's output a timed-out wait shows (its end).
_TAIL = 4000


def _outputs_so_far() -> str:
    """The end of what each process of `start()` not yet stopped has printed so far, for the
    message of a wait that timed out (a worker that never started says why there)."""
    parts = []
    for process in _started:
        output = getattr(process, "output", None)
        if output is None or output.closed:
            continue
        text = output_so_far(process)[-_TAIL:]
        state = "running" if process.poll() is None else f"exited {process.returncode}"
        parts.append(f"\n--- {' '.join(map(str, process.args[2:]))} ({state}):\n{text}")
    return "".join(parts)


def finish(process: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    """Wait for a process of `start()`; return its exit code and output.

    One that hangs is asked for its threads' stacks (SIGUSR1: a worker or a monitor prints
    them), then killed with every process it started (the children of --processes have process
    groups of their own); the stacks are in the output the failure shows.
    """
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        family = [process.pid, *descendants(process.pid)]
        for pid in family:  # one at a time: their stacks would interleave
            signal_each([pid], signal.SIGUSR1)
            time.sleep(0.5)
        signal_each(family, signal.SIGKILL)
        process.wait()
        raise AssertionError(
            f"process did not exit in {timeout}s; output:\n{_output(process)}"
        ) from None
    return process.returncode, _output(process)


def descendants(pid: int) -> list[int]:
    """The pids of the processes `pid` started, and theirs (Linux: read from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # it exited meanwhile
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


def signal_each(pids: list[int], signum: int) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signum)


def output_so_far(process: subprocess.Popen) -> str:
    """What a process of `start()` has printed so far (it may still be running).

    Read with pread: the child writes at the file's shared offset, which a seek would move.
    """
    fd = process.output.fileno()  # type: ignore[attr-defined]
    return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")


def _output(process: subprocess.Popen) -> str:
    """Everything a process of `start()` printed (it has exited)."""
    with process.output as output:  # type: ignore[attr-defined]
        output.seek(0)
        return str(output.read())


def start_together(
    tmp_path: Path,
    count: int,
    module: str,
    *args: str,
    after: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> list[subprocess.Popen]:
    """Start `count` children `python -m <module> <args> <ready> <go> <after>` with the test
    database, and let them go at one moment: each touches its file `ready` once it is set up
    (its connection open, its worker registered), then waits for the file `go`, touched here
    once every child is ready (within `timeout` seconds: tens of processes starting Django on
    a busy machine take a while). What they print is piped (`reports()` reads it)."""
    room = Path(tempfile.mkdtemp(prefix="together-", dir=tmp_path))
    go = room / "go"
    ready = [room / f"ready-{i}" for i in range(count)]
    children = [
        subprocess.Popen(
            [sys.executable, "-m", module, *args, str(flag), str(go), *after],
            cwd=ROOT,
            env=env or child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flag in ready
    ]
    _started.extend(children)
    wait_until(
        lambda: (
            all(flag.exists() for flag in ready)
            or any(child.poll() is not None for child in children)
        ),
        timeout,
        f"the {module} children to get ready",
    )
    dead = [child for child in children if child.poll() is not None]
    if dead:
        kill_all(children)
        raise AssertionError(f"a {module} child died early: {dead[0].communicate()[1]}")
    go.touch()
    return children


def reports(children: list[subprocess.Popen], timeout: float = 120) -> list[Any]:
    """Wait for the children of `start_together()`; each must exit 0; what each printed on
    its standard output, as JSON."""
    try:
        outputs = [child.communicate(timeout=timeout) for child in children]
    finally:
        kill_all(children)
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
    return [json.loads(out) for out, _ in outputs]


def kill_all(children: list[subprocess.Popen]) -> None:
    """Kill, by pid, each of `children` still running, and reap them all."""
    signal_each([child.pid for child in children if child.poll() is None], signal.SIGKILL)
    for child in children:
        child.wait()


def start_lessees(tmp_path: Path, count: int, seconds: float, queue: str) -> list[subprocess.Popen]:
    """`count` lessees of `queue` (`tests.keys_child`: leasing 3 at a time and finishing them
    for `seconds`), started together once each has registered its worker."""
    return start_together(tmp_path, count, "tests.keys_child", queue, after=(str(seconds),))
