"""Prepared statements on PostgreSQL: the cursor the hot statements (submit, bulk submit,
lease, batched finish) run through, and the plan settings of a worker's own connections.

Elsewhere, and when `SCYLLA["PREPARED_STATEMENTS"]` is off, both are Django's plain cursor and
a no-op.
"""

from __future__ import annotations

from functools import cache
from typing import Any, cast

from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import scylla_settings
from .vendors import is_postgresql


def prepared_cursor(connection: BaseDatabaseWrapper, *, shared: bool = True) -> Any:
    """A cursor whose statements PostgreSQL parses and plans once per connection.

    The hot statements of this room (submit, bulk submit, lease, batched finish) run through
    it: psycopg binds their parameters on the server and keeps each one prepared, so a repeated
    statement skips the parser and the planner. A value a plan must see (the ready status that
    picks the partial ready index) is written into the statement instead.

    `shared`: the connection's one cursor for these statements, kept open across calls
    (closing it does nothing): psycopg learns per cursor how to send each parameter type and
    read each result type, and a new cursor per statement learned it again, a fifth of a
    submission's client CPU. Its rows must be read before the next statement on the
    connection; `shared=False` gives a cursor of its own (a pipeline reads several at the end).

    Off (Django's own cursor) when `SCYLLA["PREPARED_STATEMENTS"]` is False, when the database
    sets `DISABLE_SERVER_SIDE_CURSORS` (as for PgBouncer in transaction mode, which cannot keep
    a prepared statement without `max_prepared_statements`), with psycopg2, and on every other
    vendor.
    """
    if not prepares(connection):
        return connection.cursor()
    connection.ensure_connection()
    session = connection.connection
    if session.prepare_threshold is None:
        # Django's default: psycopg then prepares nothing, even when asked. A threshold no
        # statement reaches prepares only what asks for it, and leaves the project's own
        # statements as they were.
        session.prepare_threshold = 2**31 - 1
    logged = connection.queries_logged
    kept = session.__dict__.setdefault("_scylla_cursors", {})  # goes with the session
    if shared and logged in kept:
        connection.validate_thread_sharing()  # as `_prepare_cursor` does for a new one
        return kept[logged]
    with connection.wrap_database_errors:
        raw = _prepared_cursor_class(logged, kept=shared)(session)
    # Django's own wrapper (query logging, execute_wrappers), as `connection.cursor()` uses.
    wrapped = cast(Any, connection)._prepare_cursor(raw)
    if shared:
        kept[logged] = wrapped
    return wrapped


def use_worker_plans(connection: BaseDatabaseWrapper) -> None:
    """Plan this session's statements for a worker's hot path, whatever the statistics say
    (PostgreSQL).

    For a connection that runs nothing but this app's statements (a worker's lease loop, its
    writer, its heartbeats and its handler threads' own connections), three settings, set in
    one statement:

    - prepared statements run their generic plans: a lease is otherwise re-planned on every
      call, because PostgreSQL costs its generic plan, whose `limit` it cannot see, above the
      custom ones; the generic plan walks the same ready index (the plan tests check both);
    - no plan reads the task table sequentially or sorts what it read, when it can do
      otherwise. A generic plan is made once, on the first call, and kept until the next
      ANALYZE. Made without statistics (a new installation, a worker started before the first
      tasks, a table just truncated), the lease and the finish read the whole table on every
      call, and the lease sorted every ready task of its queue, as the backlog grew. Every
      statement of the hot path has an index, or the tuple ids, to go by, and the lease walks
      the ready index in the order it takes tasks; the sorts that remain (of the few rows the
      walks picked) have no alternative and stay;
    - no JIT compilation: each statement touches a few rows, and compiling one took longer
      than running it a hundred times (the sorts that remain are costed as disabled, which
      lifts every lease's estimate above `jit_above_cost`).

    Set once per session; a no-op elsewhere, and when prepared statements are off.
    """
    if not prepares(connection):
        return
    connection.ensure_connection()
    session = connection.connection
    if getattr(session, "_scylla_worker_plans", False):
        return
    settings = {
        "plan_cache_mode": "force_generic_plan",
        "enable_seqscan": "off",
        "enable_sort": "off",
        "jit": "off",
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in settings),
            [word for pair in settings.items() for word in pair],
        )
    session._scylla_worker_plans = True


def prepares(connection: BaseDatabaseWrapper) -> bool:
    """Whether `prepared_cursor()` prepares on this connection (see there)."""
    if not is_postgresql(connection) or not scylla_settings.PREPARED_STATEMENTS:
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3 and not connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")


@cache
def _prepared_cursor_class(logged: bool, kept: bool) -> type[Any]:
    from django.db.backends.postgresql.base import ServerBindingCursor

    base: Any = ServerBindingCursor  # psycopg's server-side binding cursor, as Django sets it up

    class PreparedCursor(base):  # type: ignore[misc]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            result = super().execute(query, params, prepare=True, **kwargs)
            if logged and self._query is None:  # type: ignore[has-type]
                # psycopg keeps no query for a prepared execute, and Django's query log (DEBUG,
                # the debug toolbar, CaptureQueriesContext) reads the statement from it.
                self._query = self._convert_query(query, params)
            return result

        if kept:

            def close(self) -> None:
                """Kept open for the next statement (see `prepared_cursor`'s `shared`)."""

    return PreparedCursor
