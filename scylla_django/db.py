"""Everything that differs between database vendors, in one place.

- PostgreSQL: a lease is one statement: a MATERIALIZED CTE selects at most `limit` ready rows
  `FOR UPDATE SKIP LOCKED`, the UPDATE marks them running, and a data-modifying CTE writes their
  TaskAssignment rows. Bulk submission is one `INSERT … ON CONFLICT (rn) DO NOTHING RETURNING rn`.
- SQLite: there are no row locks, so writers are serialised instead. Every write transaction of
  this app begins with `BEGIN IMMEDIATE` (it takes the database write lock up front and waits up
  to the busy timeout for it), so a transaction that reads and then writes can never lose the
  lock race with "database is locked". Bulk submission uses the same ON CONFLICT statement.
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
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet, sql
from django.db.models.functions import Now as DjangoNow

if TYPE_CHECKING:
    from .models import Task


# LISTEN/NOTIFY channels (PostgreSQL only; elsewhere workers poll). Payloads are plain text.
READY_CHANNEL = "scylla_django_ready"  # payload: a queue whose tasks became leasable
STOP_CHANNEL = "scylla_django_stop"  # payload: the worker name whose running task was cancelled


class Now(DjangoNow):
    """The database clock (Django's `Now()`), with microseconds on SQLite too."""

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # %f is "SS.SSS": pad it to the six digits Django gives datetime parameters.
        template = "STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f000', 'NOW')"
        return self.as_sql(compiler, connection, template=template, **extra_context)


@contextmanager
def write_atomic(using: str) -> Iterator[None]:
    """`transaction.atomic(using)` that takes the write lock at BEGIN on SQLite.

    On SQLite, the outermost block is opened with `BEGIN IMMEDIATE` whatever the database's
    `transaction_mode` option says. Nested in a transaction the caller opened, it is a savepoint,
    and the caller's transaction decides (set `"transaction_mode": "IMMEDIATE"` in OPTIONS; the
    system check scylla_django.W002 says so). Elsewhere it is plain `transaction.atomic`.
    """
    connection = connections[using]
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        with transaction.atomic(using=using):
            yield
        return
    previous = getattr(connection, "transaction_mode", None)
    connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
    try:
        with transaction.atomic(using=using):
            connection.transaction_mode = previous  # type: ignore[attr-defined]
            yield
    finally:
        connection.transaction_mode = previous  # type: ignore[attr-defined]


def uses_single_statement_transitions(connection: BaseDatabaseWrapper) -> bool:
    """PostgreSQL: each transition, History row included, is one statement (one round trip)."""
    return connection.vendor == "postgresql"


def postgresql_transition(
    fenced: QuerySet[Task], values: dict[str, Any], fields: Sequence[str], event: str | None
) -> dict[str, Any] | None:
    """Apply `values` to the one row `fenced` selects and write its History row, in one statement.

    The fenced UPDATE (built by the ORM, so expressions such as `Now()` compile as usual) gets a
    RETURNING clause; a data-modifying CTE inserts the History row `{event, owner, progress}`
    from the updated row. Returns the new values of `fields`, or None if the fence matched no
    row (then nothing was written).
    """
    from .models import History

    model = fenced.model
    query = cast(sql.UpdateQuery, fenced.query.chain(sql.UpdateQuery))
    query.add_update_values(values)
    compiler = query.get_compiler(fenced.db)
    update_sql, params = compiler.as_sql()
    quote = compiler.connection.ops.quote_name
    by_name = {f.name: f for f in model._meta.concrete_fields}
    returned = [by_name[name] for name in dict.fromkeys([*fields, "owner", "progress"])]
    columns = ", ".join(quote(str(f.column)) for f in returned)
    statement = f"WITH changed AS ({update_sql} RETURNING {quote('id')}, {columns})"
    args = list(params)
    if event is not None:
        statement += (
            f", logged AS (INSERT INTO {quote(History._meta.db_table)} "
            "(task_id, typ, worker, progress, time) "
            "SELECT id, %s, owner, progress, statement_timestamp() FROM changed)"
        )
        args.append(event)
    statement += f" SELECT {columns} FROM changed"
    with compiler.connection.cursor() as cursor:
        cursor.execute(statement, args)
        rows = cursor.fetchall()
    if not rows:
        return None
    converters = compiler.get_converters([f.get_col(model._meta.db_table) for f in returned])
    [row] = compiler.apply_converters(rows, converters) if converters else rows
    return {f.attname: value for f, value in zip(returned, row, strict=True)}


def can_insert_returning_on_conflict(connection: BaseDatabaseWrapper) -> bool:
    return connection.vendor in {"postgresql", "sqlite"}


def postgresql_lease(
    using: str, worker: str, queues: Sequence[str], limit: int, timeout: timedelta
) -> list[Task]:
    """Lease up to `limit` tasks in one statement (PostgreSQL).

    The MATERIALIZED CTE is evaluated once, so it can never hand the UPDATE more than `limit`
    rows, and SKIP LOCKED lets concurrent lessees pass over each other's rows instead of queueing.
    """
    from .models import History, Task

    quote = connections[using].ops.quote_name
    task, history = quote(Task._meta.db_table), quote(History._meta.db_table)
    sql = f"""
        WITH picked AS MATERIALIZED (
            SELECT id FROM {task}
            WHERE status = 'ready' AND queue = ANY(%(queues)s)
              AND (not_before IS NULL OR not_before <= statement_timestamp())
            ORDER BY priority DESC, created ASC, id ASC
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE {task} AS t
            SET status = 'running', owner = %(worker)s,
                deadline = statement_timestamp() + %(timeout)s,
                attempts = t.attempts + 1, updated = statement_timestamp()
            FROM picked
            WHERE t.id = picked.id AND t.status = 'ready'
            RETURNING t.*
        ), assigned AS (
            INSERT INTO {history} (task_id, typ, worker, progress, time)
            SELECT id, 'TaskAssignment', %(worker)s, NULL, statement_timestamp() FROM leased
        )
        SELECT * FROM leased ORDER BY priority DESC, created ASC, id ASC
    """
    params = {"queues": list(queues), "limit": limit, "worker": worker, "timeout": timeout}
    return list(Task.objects.using(using).raw(sql, params))


def insert_ignoring_duplicates(using: str, tasks: Sequence[Task]) -> set[str]:
    """Insert `tasks` in one statement, skipping any whose rn exists; return the inserted rns."""
    from .models import Task

    connection = connections[using]
    # Every column but the key and those the database fills in itself (created, updated).
    fields = [f for f in Task._meta.concrete_fields if not f.primary_key and not f.has_db_default()]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(f.column)) for f in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params = [
        field.get_db_prep_save(getattr(obj, field.attname), connection)
        for obj in tasks
        for field in fields
    ]
    sql = (
        f"INSERT INTO {quote(Task._meta.db_table)} ({columns}) "
        f"VALUES {', '.join([row] * len(tasks))} ON CONFLICT (rn) DO NOTHING RETURNING rn"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


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


def postgresql_finish(using: str, worker: str, rows: Sequence[dict[str, Any]]) -> set[int]:
    """Complete or abort several leases of `worker` in one statement (PostgreSQL).

    `rows` are `{id, attempts, status, result, errors}` with status completed or aborted. Each
    task is fenced on its lease (running, owner, attempts); a data-modifying CTE writes the
    TaskCompletion/TaskAbort row of each one that matched. Returns the pks written.
    """
    from .enums import EventType, Status
    from .models import History, Task

    quote = connections[using].ops.quote_name
    task, history = quote(Task._meta.db_table), quote(History._meta.db_table)
    statement = f"""
        WITH outcome AS (
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
            WHERE t.id = o.id AND t.status = %(running)s AND t.owner = %(worker)s
              AND t.attempts = o.attempts
            RETURNING t.id, t.status, t.progress
        ), logged AS (
            INSERT INTO {history} (task_id, typ, worker, progress, time)
            SELECT id, CASE WHEN status = %(completed)s THEN %(completion)s ELSE %(abort)s END,
                   %(worker)s, progress, statement_timestamp()
            FROM changed
        )
        SELECT id FROM changed
    """
    params = {
        "rows": json.dumps(list(rows)),
        "completed": Status.COMPLETED.value,
        "running": Status.RUNNING.value,
        "worker": worker,
        "completion": EventType.COMPLETION.value,
        "abort": EventType.ABORT.value,
    }
    with connections[using].cursor() as cursor:
        cursor.execute(statement, params)
        return {row[0] for row in cursor.fetchall()}
