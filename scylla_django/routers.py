"""Database routers, in Django's own multi-database way (`settings.DATABASE_ROUTERS`).

- `ReadRouter` sends the reads of the admin's pages and of the API's GETs to
  `SCYLLA["READ_DATABASE"]`, a streaming replica; leases, transitions, submissions, workers and
  the monitor never run inside `reading()` and so always reach the primary.
- `QueueRouter` sends each queue named in `SCYLLA["QUEUE_DATABASES"]` to its database: a task
  is submitted there, and a worker and a monitor run per database (`--database`).

    DATABASE_ROUTERS = ["scylla_django.routers.ReadRouter", "scylla_django.routers.QueueRouter"]

See docs/howto/databases.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from django.db import DEFAULT_DB_ALIAS

from .conf import scylla_settings

APP_LABEL = "scylla_django"

# (reads, writes): where this app's models are read and written inside `reading()` and
# `working_on()`; (None, None) elsewhere, where the other routers and `using()` decide.
_chosen: ContextVar[tuple[str | None, str | None]] = ContextVar(
    "scylla_django_database", default=(None, None)
)


def databases() -> list[str]:
    """The aliases that hold tasks: `default` and those of `QUEUE_DATABASES`, in that order."""
    routed = sorted(set(scylla_settings.QUEUE_DATABASES.values()) - {DEFAULT_DB_ALIAS})
    return [DEFAULT_DB_ALIAS, *routed]


def read_database(database: str = DEFAULT_DB_ALIAS) -> str:
    """Where the pages of `database` are read: `READ_DATABASE` for `default` when set."""
    replica = scylla_settings.READ_DATABASE
    return replica if database == DEFAULT_DB_ALIAS and replica else database


def database_of(queue: str) -> str:
    """The alias that holds `queue`'s tasks."""
    return scylla_settings.QUEUE_DATABASES.get(queue, DEFAULT_DB_ALIAS)


def request_database(database: str | None, method: str | None) -> AbstractContextManager[str]:
    """The context of a request of the admin or the API that names `database` (None:
    `default`): `reading()` for GET and HEAD, `working_on()` for the others (a write on
    `default` needs no context: it is where writes go)."""
    chosen = database or DEFAULT_DB_ALIAS
    if method in ("GET", "HEAD"):
        return reading(chosen)
    if chosen == DEFAULT_DB_ALIAS:
        return nullcontext(chosen)
    return working_on(chosen)


@contextmanager
def reading(database: str = DEFAULT_DB_ALIAS) -> Iterator[str]:
    """Within the block, `ReadRouter` reads this app's models from `read_database(database)`.

    Only read-only views enter it (the admin's and API's GETs): anything written inside would
    go to a read-only replica and fail there.
    """
    alias = read_database(database)
    token = _chosen.set((alias, None))
    try:
        yield alias
    finally:
        _chosen.reset(token)


@contextmanager
def working_on(database: str) -> Iterator[str]:
    """Within the block, `ReadRouter` reads and writes this app's models on `database` (a
    primary): the operations of a request that names a database other than `default`."""
    token = _chosen.set((database, database))
    try:
        yield database
    finally:
        _chosen.reset(token)


def reading_from() -> str | None:
    """The alias `reading()` (or `working_on()`) reads from now, or None outside them."""
    return _chosen.get()[0]


class ReadRouter:
    """Inside `reading()` reads of this app's models go to its alias (writes are left to the
    other routers: the primary); inside `working_on()` reads and writes go to its database.
    Outside them it chooses nothing."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        if model._meta.app_label != APP_LABEL:
            return None
        return _chosen.get()[0]

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        if model._meta.app_label != APP_LABEL:
            return None
        return _chosen.get()[1]


class QueueRouter:
    """A task of a queue named in `QUEUE_DATABASES`, read or written, goes to its alias.

    The queue comes from the `queue` hint (`Task.objects.submit` gives it) or from the
    instance's `queue`. Rows without a queue (History, Worker, ...) follow their instance's
    database, as Django does by default, and code that runs against one database (a worker or a
    monitor with `--database`) names it with `using()`.
    """

    def _route(self, model: type[Any], hints: dict[str, Any]) -> str | None:
        if model._meta.app_label != APP_LABEL:
            return None
        queue = hints.get("queue")
        if queue is None:
            queue = getattr(hints.get("instance"), "queue", None)
        if not isinstance(queue, str):
            return None
        return scylla_settings.QUEUE_DATABASES.get(queue)

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return self._route(model, hints)

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return self._route(model, hints)
