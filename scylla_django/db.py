"""Everything that differs between database vendors, in one place.

The functions here receive the queryset (and the History model) they work on, so this module
never imports the models; statuses and event names come from `enums.TRANSITIONS` and reach the
SQL as parameters.

- PostgreSQL: every transition is one statement. A lease walks the ready index once per
  requested queue that is not paused (each walk ordered and limited, `FOR UPDATE SKIP
  LOCKED`), merges the walks,
  marks the best `limit` rows running and writes their TaskAssignment rows; it also checks, in
  the same statement, that the lessee is a registered worker that has not stopped. A worker's
  outcome and its next lease can be one statement too. Submissions are in `inserts`;
  `pg_notify` tells listening workers which queues got leasable tasks. Times
  written by a transition are `clock_timestamp()`, read after the statement's snapshot, so a
  transition that saw another one's commit is always stamped after it.
- SQLite: there are no row locks, so writers are serialised instead. Every write transaction of
  this app begins with `BEGIN IMMEDIATE` (it takes the database write lock up front and waits up
  to the busy timeout for it), so a transaction that reads and then writes can never lose the
  lock race with "database is locked".
- SQLite keeps timestamps as text. `Now` below writes them with microseconds, as Django writes
  datetime parameters, so that stored times and parameters compare correctly as text (Django's
  own `Now()` writes milliseconds there).
- Anything else (MySQL/MariaDB 10.6+): the portable ORM path, `SELECT … FOR UPDATE SKIP LOCKED`
  then a conditional UPDATE, and one savepoint per row for bulk submission.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import cache
from typing import Any, TypeVar, cast

from django.db import connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet, Value, sql
from django.db.models.functions import Now as DjangoNow

from .conf import scylla_settings
from .enums import TRANSITIONS, Operation

_Row = TypeVar("_Row", bound=models.Model)  # the Task model, which this module never imports


# LISTEN/NOTIFY channels (PostgreSQL only; elsewhere workers poll). Payloads are plain text.
READY_CHANNEL = "scylla_django_ready"  # payload: a queue whose tasks became leasable
STOP_CHANNEL = "scylla_django_stop"  # payload: the worker name whose running task was cancelled


class Now(DjangoNow):
    """The database clock (Django's `Now()`), with microseconds on SQLite too.

    Use it to read (it is the statement's start time on PostgreSQL, so indexes can use it).
    """

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # %f is "SS.SSS": pad it to the six digits Django gives datetime parameters.
        template = "STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f000', 'NOW')"
        return self.as_sql(compiler, connection, template=template, **extra_context)


CLOCK_CTE = "scylla_clock"


class Clock(Now):
    """The database clock for the times a transition writes (`Task._apply`'s values).

    On PostgreSQL it reads the `scylla_clock` CTE that `postgresql_transition` adds to its
    statement: one `clock_timestamp()`, read after the task row is locked, so that every time
    the statement writes is the same and a transition that waited for, or saw, another one's
    commit is stamped after it (`statement_timestamp()` is taken when the statement arrives,
    possibly before that commit). Elsewhere it is `Now()`.
    """

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return f"(SELECT now FROM {CLOCK_CTE})", []


def now_plus(delta: timedelta, clock: type[Now] = Now) -> models.Expression:
    """`clock` (the database's now) plus `delta`, as a datetime expression."""
    return models.ExpressionWrapper(clock() + Value(delta), output_field=models.DateTimeField())


def read_clock(using: str) -> datetime:
    """The database clock, read once (PostgreSQL: `clock_timestamp()`, after the caller's locks).

    A set operation stamps its task rows and their History rows with this one value.
    """
    connection = connections[using]
    expression = Now(output_field=models.DateTimeField())
    statement, params = sql.Query(None).get_compiler(using).compile(expression)
    if uses_single_statement_transitions(connection):
        statement, params = "clock_timestamp()", []
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {statement}", params)
        [value] = cursor.fetchone() or [None]
    for converter in connection.ops.get_db_converters(expression):
        value = converter(value, expression, connection)
    assert isinstance(value, datetime)
    return value


@contextmanager
def write_atomic(using: str) -> Iterator[None]:
    """`transaction.atomic(using)` that takes the write lock at BEGIN on SQLite.

    On SQLite, the outermost block is opened with `BEGIN IMMEDIATE` whatever the database's
    `transaction_mode` option says (the connection is opened first if needed, because opening it
    sets the mode from the options). Nested in a transaction the caller opened, it is a
    savepoint, and the caller's transaction decides (set `"transaction_mode": "IMMEDIATE"` in
    OPTIONS; the system check scylla_django.W002 says so). Elsewhere it is `transaction.atomic`.
    """
    connection = connections[using]
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        with transaction.atomic(using=using):
            yield
        return
    # Opening the connection reads `transaction_mode` from OPTIONS: open it before overriding.
    connection.ensure_connection()
    previous = getattr(connection, "transaction_mode", None)
    connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
    try:
        with transaction.atomic(using=using):
            connection.transaction_mode = previous  # type: ignore[attr-defined]
            yield
    finally:
        connection.transaction_mode = previous  # type: ignore[attr-defined]


def prepared_cursor(connection: BaseDatabaseWrapper, *, shared: bool = True) -> Any:
    """A cursor whose statements PostgreSQL parses and plans once per connection.

    The hot statements of this module (submit, bulk submit, lease, batched finish) run through
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
    if connection.vendor != "postgresql" or not scylla_settings.PREPARED_STATEMENTS:
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


def uses_single_statement_transitions(connection: BaseDatabaseWrapper) -> bool:
    """PostgreSQL: each transition, History row included, is one statement (one round trip)."""
    return connection.vendor == "postgresql"


def _concrete(model: type[models.Model], names: Sequence[str]) -> list[models.Field[Any, Any]]:
    by_name = {f.name: f for f in model._meta.concrete_fields}
    return [by_name[name] for name in names]


def _convert(
    queryset: QuerySet[Any], fields: Sequence[models.Field[Any, Any]], rows: list[Any]
) -> list[Any]:
    """Apply the fields' database converters (JSON, …) to raw `rows`, as the ORM would."""
    model: type[models.Model] = queryset.model
    converters = _converters(model, queryset.db, tuple(fields))
    if not converters:
        return rows
    connection = connections[queryset.db]
    converted = []
    for row in rows:
        values = list(row)
        for position, functions, expression in converters:
            value = values[position]
            for function in functions:
                value = function(value, expression, connection)
            values[position] = value
        converted.append(values)
    return converted


@cache
def _converters(
    model: type[models.Model], using: str, fields: tuple[models.Field[Any, Any], ...]
) -> list[tuple[int, list[Any], Any]]:
    """The converters the ORM would apply to `fields` read from `using`, by position: each
    field's own (`from_db_value`) and the backend's (none on PostgreSQL, where these run), found
    once rather than on every row read."""
    compiler = model._default_manager.using(using).all().query.get_compiler(using)
    table = model._meta.db_table
    found = compiler.get_converters([f.get_col(table) for f in fields])
    return [
        (position, functions, expression) for position, (functions, expression) in found.items()
    ]


def postgresql_transition(
    fenced: QuerySet[_Row],
    history: type[models.Model],
    values: dict[str, Any],
    fields: Sequence[str],
    operation: Operation,
    notify: tuple[str, str] | None = None,
) -> dict[str, Any] | None:
    """Apply `values` to the one row `fenced` selects and write its History row, in one statement.

    The fenced UPDATE (built by the ORM, so expressions such as `Clock()` compile as usual) gets a
    RETURNING clause; a data-modifying CTE inserts the History row `{event, owner, progress}`
    of `operation` from the updated row, stamped with the row's new `updated`. `notify` is
    `(channel, column)`: the statement also sends `pg_notify(channel, <column of the row>)`
    when that column is not null. Returns the new values of `fields`, or None if the fence
    matched no row (then nothing was written).
    """
    model = fenced.model
    event = TRANSITIONS[operation].event
    # Lock the row first (waiting for a concurrent writer if needed), then read the clock.
    lock_sql, lock_params = fenced.order_by().values("pk").query.sql_with_params()
    lock_sql += " FOR UPDATE"
    query = cast(sql.UpdateQuery, fenced.query.chain(sql.UpdateQuery))
    query.add_update_values(values)
    compiler = query.get_compiler(fenced.db)
    update_sql, params = compiler.as_sql()
    quote = compiler.connection.ops.quote_name
    extra = ["owner", "progress", "updated"] + ([notify[1]] if notify else [])
    returned = _concrete(model, list(dict.fromkeys([*fields, *extra])))
    columns = ", ".join(quote(str(f.column)) for f in returned)
    statement = (
        f"WITH locked AS MATERIALIZED ({lock_sql}), "
        f"{CLOCK_CTE} AS MATERIALIZED (SELECT clock_timestamp() AS now "
        "FROM (SELECT count(*) FROM locked) AS l), "
        f"changed AS ({update_sql} RETURNING {quote('id')}, {columns})"
    )
    args = [*lock_params, *params]
    if event is not None:
        statement += (
            f", logged AS (INSERT INTO {quote(history._meta.db_table)} "
            "(task_id, typ, worker, progress, time) "
            f"SELECT id, %s, owner, progress, {quote('updated')} FROM changed)"
        )
        args.append(event.value)
    if notify is not None:
        column = quote(str(_concrete(model, [notify[1]])[0].column))
        statement += (
            f", notified AS (SELECT count(pg_notify(%s, {column})) AS n FROM changed "
            f"WHERE {column} IS NOT NULL)"
        )
        args.append(notify[0])
        statement += f" SELECT {columns}, (SELECT n FROM notified) FROM changed"
    else:
        statement += f" SELECT {columns} FROM changed"
    with compiler.connection.cursor() as cursor:
        cursor.execute(statement, args)
        rows = [row[: len(returned)] for row in cursor.fetchall()]
    if not rows:
        return None
    [row] = _convert(fenced, returned, rows)
    return {f.attname: value for f, value in zip(returned, row, strict=True)}


def postgresql_lease(
    tasks: QuerySet[_Row],
    history: type[models.Model],
    workers: type[models.Model],
    settings: type[models.Model],
    worker_id: int,
    worker: str,
    queues: Sequence[str],
    limit: int,
    timeout: timedelta,
    finish: Sequence[dict[str, Any]] = (),
) -> tuple[dict[int, datetime], list[_Row] | None]:
    """Lease up to `limit` tasks (PostgreSQL); None if the worker may not lease. With
    `finish`, first complete or abort those rows (as `postgresql_finish`) in the same statement.
    Returns the pks finished (each with its `updated`) and the tasks leased.

    For each requested queue that is not paused, a LATERAL subquery walks the ready index
    (queue, priority desc, created, id) in order, skipping rows other lessees hold (`SKIP
    LOCKED`) and rows whose `not_before` is still ahead, and stops after `limit` rows; the
    walks are merged and cut to the best `limit`, so the cost depends on `limit` and the number
    of queues, not on the backlog, and priority-then-age order holds across queues. The locked
    rows that are not kept are released when the statement ends. The lessee must be a
    registered worker that has not stopped; otherwise nothing is leased and None is returned.

    Paused queues are skipped by the same statement (one probe of the queue settings per
    queue). If a requested queue has a running-task limit, that statement leases nothing and
    says so: the lease is then made in a transaction that first locks the limited queues'
    settings rows, then runs the statement again, which counts each limited queue's running
    tasks in its own snapshot (taken after the lock, so every earlier lease of that queue is
    counted) and walks at most the room left under the limit.

    Finishing and leasing in one statement is one round trip and one commit for a worker that
    ends a task and takes the next: the finished tasks and the leased ones change status in
    the same commit, so no snapshot sees the worker hold both. With a limited queue the
    outcomes are written by the first statement, and the lease is made under the lock after.
    """
    finishing = bool(finish)
    statement, params = _lease_statement(
        tasks, history, workers, settings, locked=False, finishing=finishing
    )
    params.update(worker_id=worker_id, worker=worker, queues=list(queues), limit=limit)
    params.update(timeout=timeout, locked=False)
    if finishing:
        params["rows"] = json.dumps(list(finish))
    with prepared_cursor(connections[tasks.db]) as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    finished: dict[int, datetime] = {}
    skip = 2
    if finishing:  # the pks finished and their `updated`, after the first two columns
        finished = dict(zip(rows[0][2] or [], rows[0][3] or [], strict=True))
        skip = 4
    if rows[0][0] and rows[0][1]:  # a limited queue: lease again under its lock
        rows, skip = _lease_limited(tasks, history, workers, settings, params), 2
    return finished, _leased(tasks, rows, skip) if rows[0][0] else None


def _lease_limited(
    tasks: QuerySet[_Row],
    history: type[models.Model],
    workers: type[models.Model],
    settings: type[models.Model],
    params: dict[str, Any],
) -> list[tuple[Any, ...]]:
    """The lease of `postgresql_lease` when a requested queue has a running-task limit: in a
    transaction that first locks the limited queues' settings rows. Returns the lease
    statement's rows."""
    connection = connections[tasks.db]
    quote = connection.ops.quote_name
    statement, _ = _lease_statement(tasks, history, workers, settings, locked=True)
    with transaction.atomic(using=tasks.db), prepared_cursor(connection) as cursor:
        cursor.execute(
            f"SELECT 1 FROM {quote(settings._meta.db_table)} "
            "WHERE queue = ANY(%s) AND max_running IS NOT NULL AND NOT paused "
            "ORDER BY queue FOR UPDATE",
            [params["queues"]],
        )
        cursor.execute(statement, {**params, "locked": True})
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows


def _leased(tasks: QuerySet[_Row], rows: list[tuple[Any, ...]], skip: int) -> list[_Row]:
    """The tasks of a lease statement's `rows` (each row's task columns follow `skip` others;
    a row without a task, as when nothing was leased, is left out)."""
    fields = list(tasks.model._meta.concrete_fields)
    values = [row[skip:] for row in rows if row[skip] is not None]
    names = [f.attname for f in fields]
    return [tasks.model.from_db(tasks.db, names, row) for row in _convert(tasks, fields, values)]


def _lease_statement(
    tasks: QuerySet[_Row],
    history: type[models.Model],
    workers: type[models.Model],
    settings: type[models.Model],
    *,
    locked: bool,
    finishing: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The lease statement (see `_lease_sql`), and a new dict of its fixed parameters."""
    statement, params = _lease_sql(
        tasks.model, history, workers, settings, tasks.db, locked, finishing
    )
    return statement, dict(params)


@cache
def _lease_sql(
    model: type[models.Model],
    history: type[models.Model],
    workers: type[models.Model],
    settings: type[models.Model],
    using: str,
    locked: bool,
    finishing: bool,
) -> tuple[str, dict[str, Any]]:
    """The lease statement of `postgresql_lease` and the parameters that name statuses and
    events (the caller adds the lessee, queues, limit, timeout and `locked`).

    `finishing`: the statement first writes the outcomes of the `rows` parameter, with the
    CTEs of `_finish_statement`, and its rows carry the pks finished and their `updated`
    (arrays, in the same order) after the first two columns (`postgresql_lease`'s `finish`).

    Each queue's walk is limited by the `limit` parameter itself, which the planner sees: its
    estimate of the statement stays small (a walk limited by a column is costed as a tenth of
    the queue, which, at a million rows over 50 queues, crossed `jit_above_cost` and compiled
    the statement on every lease). Locked, each walk is read through a second limit, the
    queue's room: it stops there, so no row past the room is locked, and the second limit,
    being over at most `limit` rows, costs nothing that grows with the backlog.
    """
    transition = TRANSITIONS[Operation.LEASE]
    [source] = transition.sources
    assert transition.event is not None
    connection = connections[using]
    quote = connection.ops.quote_name
    task_table = quote(model._meta.db_table)
    fields = list(model._meta.concrete_fields)
    columns = ", ".join(f"t.{quote(str(f.column))}" for f in fields)
    # The ready status is written into the statement, not bound: the statement is prepared, and
    # a generic plan must still see `status = 'ready'` to walk the partial ready index.
    ready = _literal(source.value)
    finish, params = _finish_ctes(model, history, using) if finishing else ("", {})
    finished = (
        "(SELECT array_agg(id ORDER BY id) FROM changed), "
        "(SELECT array_agg(updated ORDER BY id) FROM changed), "
        if finishing
        else ""
    )
    # `gate`: the requested queues that are not paused, each with the room it has (`budget`):
    # `limit`, or for a limited queue what is left under its limit (counted only when locked).
    statement = f"""
        WITH {finish + ", " if finish else ""}lessee AS MATERIALIZED (
            SELECT 1 FROM {quote(workers._meta.db_table)}
            WHERE id = %(worker_id)s AND stopped IS NULL
        ), gate AS MATERIALIZED (
            SELECT q.name, s.max_running IS NOT NULL AS limited,
                CASE WHEN s.max_running IS NULL THEN %(limit)s
                     WHEN NOT %(locked)s THEN 0
                     ELSE GREATEST(0, LEAST(%(limit)s, s.max_running - (
                        SELECT count(*) FROM {task_table} AS r
                        WHERE r.status = %(target)s AND r.queue = q.name)))
                END AS budget
            FROM unnest(%(queues)s::text[]) AS q(name)
            LEFT JOIN {quote(settings._meta.db_table)} AS s ON s.queue = q.name
            WHERE s.paused IS NOT TRUE
        ), picked AS MATERIALIZED (
            SELECT c.ctid FROM gate AS q
            CROSS JOIN LATERAL (
                {"SELECT * FROM (" if locked else ""}
                SELECT t.ctid, t.id, t.priority, t.created FROM {task_table} AS t
                WHERE t.status = {ready} AND t.queue = q.name
                  AND (t.not_before IS NULL OR t.not_before <= statement_timestamp())
                  AND EXISTS (SELECT 1 FROM lessee)
                  AND (%(locked)s OR NOT EXISTS (SELECT 1 FROM gate WHERE limited))
                ORDER BY t.priority DESC, t.created ASC, t.id ASC
                LIMIT %(limit)s
                FOR UPDATE OF t SKIP LOCKED
                {") AS w LIMIT q.budget" if locked else ""}
            ) AS c
            ORDER BY c.priority DESC, c.created ASC, c.id ASC
            LIMIT %(limit)s
        ), clock AS MATERIALIZED (
            -- Read once the rows are locked, so after every commit the lease could see.
            SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM picked) AS p
        ), leased AS (
            UPDATE {task_table} AS t
            SET status = %(target)s, owner = %(worker)s,
                deadline = clock.now + %(timeout)s, lease_length = %(timeout)s,
                attempts = t.attempts + 1, updated = clock.now
            FROM clock
            -- The rows `picked` locked, by their tuple ids: a TID scan, whatever the planner
            -- knows of the table (joined by key and re-filtered by status, a table without
            -- statistics yet was walked whole through the ready index). They are still ready:
            -- FOR UPDATE re-checked the status when it locked them, and they stay locked.
            WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM picked))
            RETURNING {columns}
        ), assigned AS (
            INSERT INTO {quote(history._meta.db_table)} (task_id, typ, worker, progress, time)
            SELECT id, %(event)s, owner, NULL, updated FROM leased
        )
        SELECT (SELECT count(*) FROM lessee),
            NOT %(locked)s AND EXISTS (SELECT 1 FROM gate WHERE limited), {finished}t.*
        FROM (SELECT 1) AS one
        LEFT JOIN leased AS t ON true
        ORDER BY t.priority DESC, t.created ASC, t.id ASC
    """
    params.update(target=transition.target.value, event=transition.event.value)
    return compact(statement), params


def compact(statement: str) -> str:
    """`statement` without its comments (`-- …` to the end of a line) and with single spaces.

    Shorter on the wire, and short enough for psycopg to keep its parsed form: it parses a
    statement of over 4 kB again on every call. The statements given here quote no text that
    holds two hyphens or runs of spaces.
    """
    lines = (line.split("--", 1)[0] for line in statement.splitlines())
    return " ".join(" ".join(lines).split())


def _literal(word: str) -> str:
    """A status or event name as an SQL string literal (they are plain lowercase words)."""
    assert word.isidentifier() and word.isascii(), word
    return f"'{word}'"


def postgresql_notify(using: str, channel: str, payloads: Sequence[str]) -> None:
    """`pg_notify(channel, payload)` once per distinct payload (delivered when the transaction
    commits): READY_CHANNEL with queue names, STOP_CHANNEL with worker names."""
    if not payloads:
        return
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_notify(%s, p)) FROM unnest(%s::text[]) AS p",
            [channel, sorted(set(payloads))],
        )


def update_returning_pks(fenced: QuerySet[Any], values: dict[str, Any]) -> set[int]:
    """Apply `values` to the rows `fenced` selects, in one statement; return their pks.

    PostgreSQL and SQLite (3.35+) return the updated keys from the UPDATE itself. Elsewhere the
    rows are locked and read first, then updated, in one transaction.
    """
    connection = connections[fenced.db]
    if connection.vendor not in {"postgresql", "sqlite"}:
        with transaction.atomic(using=fenced.db):
            pks = set(fenced.select_for_update().values_list("pk", flat=True))
            fenced.model._default_manager.using(fenced.db).filter(pk__in=pks).update(**values)
        return pks
    query = cast(sql.UpdateQuery, fenced.query.chain(sql.UpdateQuery))
    query.add_update_values(values)
    compiler = query.get_compiler(fenced.db)
    update_sql, params = compiler.as_sql()
    pk_column = connection.ops.quote_name(str(fenced.model._meta.pk.column))
    with connection.cursor() as cursor:
        cursor.execute(f"{update_sql} RETURNING {pk_column}", params)
        return {row[0] for row in cursor.fetchall()}


def postgresql_finish(
    tasks: QuerySet[_Row],
    history_model: type[models.Model],
    worker: str,
    rows: Sequence[dict[str, Any]],
) -> dict[int, datetime]:
    """Complete or abort several leases of `worker` in one statement (PostgreSQL).

    `rows` are `{id, attempts, status, result, errors}` with the target status of the complete
    or abort transition. Each task is fenced on its lease (the transitions' source status,
    owner, attempts); a data-modifying CTE writes the completion or abort History row of each one
    that matched. Returns the pks written, each with its `updated`.
    """
    statement, params = _finish_statement(tasks, history_model)
    params.update(rows=json.dumps(list(rows)), worker=worker)
    with prepared_cursor(connections[tasks.db]) as cursor:
        cursor.execute(statement, params)
        return dict(cursor.fetchall())


def _finish_statement(
    tasks: QuerySet[_Row], history_model: type[models.Model]
) -> tuple[str, dict[str, Any]]:
    """The batched finish statement and its fixed parameters (`rows` and `worker` are the
    caller's)."""
    ctes, params = _finish_ctes(tasks.model, history_model, tasks.db)
    return compact(f"WITH {ctes} SELECT id, updated FROM changed"), dict(params)


@cache
def _finish_ctes(
    model: type[models.Model], history_model: type[models.Model], using: str
) -> tuple[str, dict[str, Any]]:
    """The CTEs of the batched finish (`outcome`, `changed`: the rows written, `logged`), and
    their fixed parameters (not to be changed: the caller copies them)."""
    complete, abort = TRANSITIONS[Operation.COMPLETE], TRANSITIONS[Operation.ABORT]
    [source] = complete.sources | abort.sources
    assert complete.event is not None and abort.event is not None
    quote = connections[using].ops.quote_name
    task, history = quote(model._meta.db_table), quote(history_model._meta.db_table)
    ctes = f"""outcome AS (
            SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb)
                AS o(id bigint, attempts integer, status text, result jsonb, errors jsonb)
        ), changed AS (
            UPDATE {task} AS t
            SET status = o.status,
                progress = CASE WHEN o.status = %(completed)s THEN 1.0 ELSE t.progress END,
                result = CASE WHEN o.status = %(completed)s THEN o.result ELSE t.result END,
                errors = CASE WHEN o.status = %(completed)s THEN t.errors ELSE o.errors END,
                deadline = NULL, updated = statement_timestamp()
            FROM outcome AS o
            -- Found by key, then fenced on the lease (running, owned by the worker, the same
            -- attempt). The fence is written with IS NOT DISTINCT FROM (the same test here:
            -- none of the values is NULL) because no index answers it: a worker's finished
            -- tasks keep its name, and a plan that found the rows through the owner (or the
            -- running) index, or walked a table without statistics, read every task the
            -- worker had ever finished, on every finish. A row changed by a concurrent
            -- transaction is re-checked, fence included, on its new version.
            WHERE t.id = ANY(ARRAY(SELECT id FROM outcome)) AND t.id = o.id
              AND (t.status, t.owner, t.attempts)
                IS NOT DISTINCT FROM (%(running)s, %(worker)s, o.attempts)
            RETURNING t.id, t.status, t.progress, t.updated
        ), logged AS (
            INSERT INTO {history} (task_id, typ, worker, progress, time)
            SELECT id, CASE WHEN status = %(completed)s THEN %(completion)s ELSE %(abort)s END,
                   %(worker)s, progress, statement_timestamp()
            FROM changed
        )
    """
    params: dict[str, Any] = {
        "completed": complete.target.value,
        "running": source.value,
        "completion": complete.event.value,
        "abort": abort.event.value,
    }
    return ctes, params
