"""The ports the tests/ha servers (PgBouncer, private PostgreSQL clusters, etcd, Patroni) take:
a block of their own, SCYLLA_TEST_HA_PORTS ("first-last", default 55420-55439), so that they
never take a port another server on the machine expects to find free."""

from __future__ import annotations

import os
import socket


def block() -> range:
    first, last = os.environ.get("SCYLLA_TEST_HA_PORTS", "55420-55439").split("-")
    return range(int(first), int(last) + 1)


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
