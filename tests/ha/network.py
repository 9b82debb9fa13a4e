"""Hosts for the tests: Linux network namespaces, each joined to this machine by a veth pair,
so that processes started in one reach the database over a real network interface that a test
can take down (`ip link set … down`) and bring back.

Namespaces and links are named `scyha<tag><n>`; `Hosts.remove()` deletes them (deleting a
namespace deletes its end of the pair, and with it the other end).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import processes
from tests.processes import ROOT, child_env


def available() -> str | None:
    """Why network namespaces cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    probe = f"scyha{os.getpid()}probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], check=False)
    return None


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class Hosts:
    """`count` hosts: namespace `names[n]`, reaching this machine at `server_ips[n]` over the
    link `links[n]` (this machine's end of the pair)."""

    def __init__(self, count: int) -> None:
        tag = os.getpid() % 100000
        # A /30 per host in a block picked by the pid, so that two runs do not collide.
        block = 64 + tag % 64
        self.names = [f"scyha{tag}n{n}" for n in range(count)]
        self.links = [f"scyha{tag}h{n}" for n in range(count)]
        self.server_ips = [f"10.{block}.{n}.1" for n in range(count)]
        self.host_ips = [f"10.{block}.{n}.2" for n in range(count)]
        self.subnet = f"10.{block}.0.0/16"
        self.made: list[str] = []

    def create(self) -> None:
        for n, name in enumerate(self.names):
            ip("netns", "add", name)
            self.made.append(name)
            inside = f"scyha{n}i"  # the namespace's own end, named inside it
            ip("link", "add", self.links[n], "type", "veth", "peer", "name", inside, "netns", name)
            ip("addr", "add", f"{self.server_ips[n]}/24", "dev", self.links[n])
            ip("link", "set", self.links[n], "up")
            ip("-n", name, "addr", "add", f"{self.host_ips[n]}/24", "dev", inside)
            ip("-n", name, "link", "set", inside, "up")
            ip("-n", name, "link", "set", "lo", "up")

    def cut(self, n: int) -> None:
        ip("link", "set", self.links[n], "down")

    def restore(self, n: int) -> None:
        ip("link", "set", self.links[n], "up")

    def remove(self) -> None:
        for name in self.made:
            subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)
        for link in self.links:  # normally gone with its namespace
            subprocess.run(["ip", "link", "delete", link], check=False, capture_output=True)
        self.made.clear()

    def start(self, n: int, *args: str, env: dict[str, str]) -> subprocess.Popen:
        """`manage.py <args>` in host `n`'s namespace (`ip netns exec` execs it: its pid is the
        process's own); output as `tests.processes.start` keeps it."""
        output = tempfile.TemporaryFile("w+")  # noqa: SIM115 (finish() closes it)
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.names[n], sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env={**child_env(), **env},
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )
        process.output = output  # type: ignore[attr-defined]
        processes._started.append(process)  # stopped by pid if the test leaves it running
        return process


def allow_clients(data: Path, subnet: str) -> None:
    """Let a private cluster's pg_hba.conf trust `subnet` (reload the server after)."""
    with (data / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {subnet} trust\n")
