"""Prepared statements on PostgreSQL: the cursor the hot statements (submit, bulk submit,
lease, batched finish) run through, and the plan settings of a worker's own connections.

Elsewhere, and when `SCYLLA["PREPARED_STATEMENTS"]` is off, both are Django's plain cursor and
a no-op.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache, lru_cache
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
    raw = _raw_cursor_class()
    if not logged and raw is not None:
        base = raw

    class PreparedCursor(base):  # type: ignore[misc]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            if base is raw:
                query, params = native(query, params)
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


@cache
def _raw_cursor_class() -> type[Any] | None:
    """A cursor that sends its statements as they are written, with PostgreSQL's own
    placeholders (psycopg 3.2+), with Django's additions to psycopg's cursors; None with an
    older psycopg."""
    import psycopg
    from django.db.backends.postgresql.base import CursorMixin

    if not hasattr(psycopg, "RawCursor"):
        return None
    return type("RawBindingCursor", (CursorMixin, psycopg.RawCursor), {})


def native(query: str, params: Any) -> tuple[str, Any]:
    """`query` and `params` as PostgreSQL takes them: placeholders `$1`, `$2`, … and the
    values in that order.

    psycopg turns its own placeholders (`%s`, `%(name)s`, `%%` for a percent sign) into
    PostgreSQL's on every execute, and remembers the result only for statements under 4 KB
    with at most 50 values: the lease (7 KB with its outcomes) was split again, in Python, on
    each call. Here each statement is split once per process. Without values a statement is
    sent as written, as psycopg sends it (`%%` stays).
    """
    if not isinstance(query, str) or params is None:
        return query, params
    written, names = _native_query(query)
    if isinstance(names, tuple):
        if not isinstance(params, Mapping):
            raise TypeError("a statement with named placeholders takes a mapping of values")
        return written, [params[name] for name in names]
    if params is not None and len(params) != names:
        raise TypeError(f"the statement has {names} placeholders, and {len(params)} values")
    return written, params


#: psycopg's placeholders: `%s`, `%(name)s`, and `%%` (a percent sign).
_PLACEHOLDER = re.compile(r"%(?:\((?P<name>[^)]+)\))?(?P<format>.)", re.S)


@lru_cache(maxsize=256)
def _native_query(query: str) -> tuple[str, tuple[str, ...] | int]:
    """`query` with PostgreSQL's placeholders, and its values' names in order (a repeated name
    is one placeholder), or how many positional values it takes."""
    numbers: dict[str, int] = {}
    positional = 0

    def placeholder(match: re.Match[str]) -> str:
        nonlocal positional
        name, kind = match.group("name"), match.group("format")
        if name is None and kind == "%":
            return "%"
        if kind != "s":
            raise ValueError(f"unsupported placeholder {match.group(0)!r} in a prepared statement")
        if name is None:
            positional += 1
            return f"${positional}"
        if name not in numbers:
            numbers[name] = len(numbers) + 1
        return f"${numbers[name]}"

    written = _PLACEHOLDER.sub(placeholder, query)
    if numbers and positional:
        raise ValueError("a prepared statement mixes named and positional placeholders")
    if numbers:
        return written, tuple(numbers)
    return written, positional
