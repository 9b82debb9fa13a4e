"""The ports the tests/ha servers (PgBouncer, private PostgreSQL clusters, etcd, Patroni) take:
a block of their own, SCYLLA_TEST_HA_PORTS ("first-last"; by default 20 ports from 55420 per
pytest-xdist worker), so that they never take a port another server on the machine expects to
find free."""

from __future__ import annotations

import os
import socket


def block() -> range:
    """SCYLLA_TEST_HA_PORTS, or 20 ports from 55420 on: the next 20 for each pytest-xdist
    worker after the first (`gw1` takes 55440-55459, ...), so that two workers never race
    for one port."""
    given = os.environ.get("SCYLLA_TEST_HA_PORTS")
    if given:
        first, last = given.split("-")
        return range(int(first), int(last) + 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = 55420 + 20 * (int(worker) if worker.isdigit() else 0)
    return range(first, first + 20)


def free_ports(count: int, *, skip: int = 0) -> list[int]:
    """`count` ports of the block, from its `skip`-th on, that nothing listens on now."""
    found = []
    for port in block()[skip:]:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise RuntimeError(f"fewer than {count} free ports in {block()} (SCYLLA_TEST_HA_PORTS)")
