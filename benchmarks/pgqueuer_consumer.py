"""PgQueuer's side of benchmarks/beside_pgqueuer.py, run in PgQueuer's own virtualenv.

    python pgqueuer_consumer.py enqueue 5000   # enqueue 5,000 jobs in one call
    python pgqueuer_consumer.py drain          # a consumer at PgQueuer's defaults, until empty

Both read the database from PGQUEUER_BENCH_DSN and connect as PgQueuer's quick start does
(asyncpg). The consumer has one entrypoint, `noop`, whose jobs do nothing; it runs through
`pgqueuer.run`, what `pgq run pgqueuer_consumer:main --mode drain` runs (PgQueuer 1.6.0's
command line fails here on its own default log level, a string where it wants its enum),
with every other setting at `pgq run`'s default, and logs at its INFO level as `pgq run` does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pgqueuer
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode


@asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    """The consumer (a factory as PgQueuer 1.6 takes one): `noop` jobs, every other setting
    PgQueuer's default."""
    connection = await asyncpg.connect(os.environ["PGQUEUER_BENCH_DSN"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    try:
        yield pgq
    finally:
        await connection.close()


async def enqueue(count: int) -> None:
    """Enqueue `count` `noop` jobs, in one call of PgQueuer's batch enqueue."""
    connection = await asyncpg.connect(os.environ["PGQUEUER_BENCH_DSN"])
    try:
        await Queries(AsyncpgDriver(connection)).enqueue(
            ["noop"] * count, [None] * count, [0] * count
        )
    finally:
        await connection.close()


async def drain() -> None:
    """Consume until the queue is empty, at `pgq run`'s defaults."""
    await pgqueuer.run(main, mode=QueueExecutionMode.drain)


if __name__ == "__main__":
    if sys.argv[1:2] == ["enqueue"]:
        asyncio.run(enqueue(int(sys.argv[2])))
    elif sys.argv[1:] == ["drain"]:
        logging.basicConfig(level=logging.INFO)
        asyncio.run(drain())
    else:
        raise SystemExit(__doc__)
