"""How new tasks reach the task table, per database vendor: the single and bulk submission
statements of PostgreSQL, the bulk insert of SQLite.

- PostgreSQL: a submission is one `INSERT … ON CONFLICT (rn) DO NOTHING RETURNING`, which
  reports a duplicate rn as "no row returned"; a bulk one inserts chunks of rows expanded
  from a JSON document, its statements sent in one pipeline. Both notify listening workers
  (`READY_CHANNEL`) in the same statement.
- SQLite: the bulk insert is one `INSERT … ON CONFLICT DO NOTHING RETURNING` per chunk.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from itertools import chain
from typing import Any, TypeVar

from django.db import connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

from ..enums import ACTIVE_STATUSES
from .notifications import READY_CHANNEL
from .prepared import prepared_cursor, prepares
from .rows import convert_rows
from .vendors import returns_written_rows

_Row = TypeVar("_Row", bound=models.Model)  # the Task model, which this room never imports


def _insert_parts(tasks: QuerySet[_Row]) -> tuple[list[models.Field[Any, Any]], str]:
    # Every column but the key and those the database fills in itself (created, updated).
    fields = [
        f for f in tasks.model._meta.concrete_fields if not f.primary_key and not f.has_db_default()
    ]
    quote = connections[tasks.db].ops.quote_name
    return fields, ", ".join(quote(str(f.column)) for f in fields)


def _ready_notification(table: str) -> str:
    """A CTE that notifies READY_CHANNEL once per queue of `table`'s rows leasable now."""
    return (
        "notified AS (SELECT count(pg_notify(%s, queue)) AS n FROM "
        f"(SELECT DISTINCT queue FROM {table} "
        "WHERE not_before IS NULL OR not_before <= statement_timestamp()) AS q)"
    )


# What a submission sets (by attribute name), with its type in SQL; every other column takes
# its default.
SUBMITTED = {
    "rn": "text",
    "queue": "text",
    "spec": "jsonb",
    "priority": "integer",
    "not_before": "timestamptz",
    "retry_policy": "jsonb",
    "retry_of": "text",
    "root": "text",
    "attempt": "integer",
    "keys": "jsonb",
    "order_key": "text",
    "order_seq": "bigint",
    "order_block": "boolean",
    "rate_cost": "integer",
    "fair_key": "text",
    "timeout": "interval",
    "parent": "text",
    "expires_at": "timestamptz",
    "batch_id": "bigint",
    "notify": "text",
    "version": "smallint",
}


# What a keyed submission sets besides SUBMITTED (see `postgresql_submit_keyed`).
KEYED = ("unique_key", "unique_window", "unique_held")


@dataclass(frozen=True)
class _Submission:
    """The submit statements of a task model on one database, built once."""

    given: list[models.Field[Any, Any]]  # the SUBMITTED fields, first in the column list
    one: str  # a single task: its values as parameters
    one_uncapped: str  # the same, inserted only if its queue has no cap on ready tasks
    many: str  # many tasks: their values as one JSON array, those of capped queues left out


@cache
def _submission(model: type[models.Model], using: str) -> _Submission:
    connection = connections[using]
    quote = connection.ops.quote_name
    fields, _ = _insert_parts(model._default_manager.using(using))
    given = [f for f in fields if f.attname in SUBMITTED]
    others = [f for f in fields if f.attname not in SUBMITTED]
    if len(given) != len(SUBMITTED):
        raise TypeError("a SUBMITTED field is not a column of the model")
    columns = ", ".join(quote(str(f.column)) for f in [*given, *others])
    # The other columns' defaults are constants, written into the statements as literals
    # (prepared as the ORM would, quoted by the driver): nothing to adapt and send per task.
    if any(
        f.has_default() and callable(f.default) and f.default not in (list, dict) for f in others
    ):
        raise TypeError("a default that varies cannot be a literal")
    operations: Any = connection.ops  # PostgreSQL's, which can compose SQL with literals
    defaults = operations.compose_sql(
        ", ".join(["%s"] * len(others)),
        [f.get_db_prep_save(f.get_default(), connection) for f in others],
    )
    table = quote(model._meta.db_table)
    record = ", ".join(f"{quote(f.attname)} {SUBMITTED[f.attname]}" for f in given)
    picked = ", ".join(f"r.{quote(f.attname)}" for f in given)
    typed = ", ".join(f"%s::{SUBMITTED[f.attname]}" for f in given)
    capped = _capped_queue(model, quote)
    returning = (
        "RETURNING id, created, updated, CASE WHEN not_before IS NULL "
        "OR not_before <= statement_timestamp() THEN pg_notify(%s, queue) END"
    )
    return _Submission(
        given=given,
        # One row: its notification is an expression of what it returns (no CTE around the
        # INSERT to count notifications, as for many rows: less for the server to do).
        one=(
            f"INSERT INTO {table} ({columns}) "
            f"VALUES ({', '.join(['%s'] * len(given))}, {defaults}) ON CONFLICT (rn) DO NOTHING "
            f"{returning}"
        ),
        # A cap on ready tasks is decided by a transaction that locks it (see
        # `models.admission`): a submission to a capped queue inserts nothing here, and the
        # caller takes that way instead. An uncapped queue's stays one statement.
        # Its last column says "capped": no row is a duplicate rn.
        one_uncapped=(
            f"WITH capped AS ({capped.format(queue='%s::text')}), "
            f"inserted AS (INSERT INTO {table} ({columns}) SELECT {typed}, {defaults} "
            "WHERE NOT EXISTS (SELECT 1 FROM capped) "
            f"ON CONFLICT (rn) DO NOTHING {returning}) "
            "SELECT *, false FROM inserted "
            "UNION ALL SELECT NULL, NULL, NULL, NULL, true FROM capped"
        ),
        # Its last column says "capped" (that row's rn was left out).
        many=(
            f"WITH r AS (SELECT * FROM jsonb_to_recordset(%s::jsonb) AS r({record})), "
            f"inserted AS (INSERT INTO {table} ({columns}) SELECT {picked}, {defaults} FROM r "
            f"WHERE NOT EXISTS ({capped.format(queue='r.queue')}) "
            "ON CONFLICT (rn) DO NOTHING RETURNING rn, queue, not_before), "
            f"{_ready_notification('inserted')} "
            "SELECT rn, (SELECT n FROM notified), false FROM inserted UNION ALL "
            f"SELECT r.rn, NULL, true FROM r WHERE EXISTS ({capped.format(queue='r.queue')})"
        ),
    )


def _capped_queue(model: type[models.Model], quote: Any) -> str:
    """A query of the queue setting that caps the ready tasks of `{queue}` (a template)."""
    setting = model._meta.apps.get_model(model._meta.app_label, "QueueSetting")
    table = quote(setting._meta.db_table)
    return f"SELECT 1 FROM {table} AS s WHERE s.queue = {{queue}} AND s.max_ready IS NOT NULL"


@cache
def _keyed_submission(model: type[models.Model], using: str) -> tuple[list[Any], str]:
    """The keyed submission statement of a task model on one database (see
    `postgresql_submit_keyed`), and the fields whose values are its first parameters."""
    connection = connections[using]
    quote = connection.ops.quote_name
    fields, _ = _insert_parts(model._default_manager.using(using))
    keyed = [f for f in model._meta.concrete_fields if f.name in KEYED]
    given = [f for f in fields if f.attname in SUBMITTED] + keyed
    others = [f for f in fields if f not in given]
    operations: Any = connection.ops
    defaults = operations.compose_sql(
        ", ".join(["%s"] * len(others)),
        [f.get_db_prep_save(f.get_default(), connection) for f in others],
    )
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(str(f.column)) for f in [*given, *others])
    every = [quote(str(f.column)) for f in model._meta.concrete_fields]
    returned = ", ".join(every)
    held = ", ".join(f"t.{c}" for c in every)
    # The holder's condition is the unique index's own (the statuses as literals, as the
    # index has them), so that the planner reads the holder from that index.
    statuses = sorted(s.value for s in ACTIVE_STATUSES)
    active = operations.compose_sql(", ".join(["%s"] * len(statuses)), statuses)
    statement = (
        f"WITH inserted AS (INSERT INTO {table} ({columns}) "
        f"VALUES ({', '.join(['%s'] * len(given))}, {defaults}) ON CONFLICT DO NOTHING "
        f"RETURNING {returned}, CASE WHEN not_before IS NULL "
        "OR not_before <= statement_timestamp() THEN pg_notify(%s, queue) END) "
        f"SELECT true, false, {returned} FROM inserted UNION ALL "
        f"SELECT false, t.status NOT IN ({active}) AND "
        "COALESCE(t.updated + t.unique_window <= statement_timestamp(), false), "
        f"{held} FROM {table} AS t WHERE t.unique_key = %s "
        f"AND (t.status IN ({active}) OR t.unique_held) "
        "AND NOT EXISTS (SELECT 1 FROM inserted)"
    )
    return given, statement


def postgresql_submit_keyed(
    tasks: QuerySet[_Row], values: dict[str, Any]
) -> tuple[bool, bool, list[Any]] | None:
    """Insert one keyed task in one statement (PostgreSQL), unless its key is held.

    Returns `(inserted, window_over, row)`: the new task's row, or the row of the task that
    holds the key (`window_over` when it finished longer than its window ago, and the caller
    may release the key and try again); the row has every concrete field of the model, in
    order, converted as the ORM would. None when nothing was inserted and no holder is
    visible: the rn exists, or the holder committed after this statement's snapshot (the
    unique index saw it, the statement's read cannot), so the next statement sees it.

    `INSERT … ON CONFLICT DO NOTHING` lets the partial unique index on the key decide: of
    concurrent submissions of a key one inserts, the others wait for its commit and insert
    nothing. Listening workers are notified as by `postgresql_submit`.
    """
    connection = connections[tasks.db]
    given, statement = _keyed_submission(tasks.model, tasks.db)
    params = [
        _db_value(f, values[f.attname] if f.attname in values else f.get_default(), connection)
        for f in given
    ]
    with prepared_cursor(connection) as cursor:
        cursor.execute(statement, [*params, READY_CHANNEL, values["unique_key"]])
        row = cursor.fetchone()
    if row is None:
        return None
    fields = list(tasks.model._meta.concrete_fields)
    (converted,) = convert_rows(tasks.model, tasks.db, fields, [row[2 : 2 + len(fields)]])
    return bool(row[0]), bool(row[1]), list(converted)


#: What `postgresql_submit(..., unless_capped=True)` returns for a capped queue.
CAPPED = "capped"


def postgresql_submit(
    tasks: QuerySet[_Row], values: dict[str, Any], *, unless_capped: bool = False
) -> tuple[int, datetime, datetime] | str | None:
    """Insert one task in one statement (PostgreSQL); None if its rn exists. With
    `unless_capped`, CAPPED if its queue has a cap on ready tasks (nothing is inserted).

    `values` are the validated SUBMITTED fields (a missing one takes its default).
    `ON CONFLICT (rn) DO NOTHING` reports a duplicate as "no row returned", so no error and no
    second query is needed; in autocommit this is the whole round trip. Listening workers are
    notified in the same statement if the task is leasable now.
    """
    connection = connections[tasks.db]
    submission = _submission(tasks.model, tasks.db)
    params = [
        _db_value(f, values[f.attname] if f.attname in values else f.get_default(), connection)
        for f in submission.given
    ]
    with prepared_cursor(connection) as cursor:
        if unless_capped:
            cursor.execute(submission.one_uncapped, [values["queue"], *params, READY_CHANNEL])
        else:
            cursor.execute(submission.one, [*params, READY_CHANNEL])
        row = cursor.fetchone()
    if row is None:
        return None
    if unless_capped and row[4]:
        return CAPPED
    return (row[0], row[1], row[2])


def _db_value(field: models.Field[Any, Any], value: Any, connection: BaseDatabaseWrapper) -> Any:
    """A validated value of a SUBMITTED field as a statement parameter: what
    `field.get_db_prep_save(value, connection)` gives, without its generic path for the plain
    text and integer values (the ones every submission has)."""
    if value is None:
        return None
    if isinstance(field, models.JSONField):  # any JSON document, a bare string or number too
        return connection.ops.adapt_json_value(value, field.encoder)
    if type(value) is str or type(value) is int:
        return value
    return field.get_db_prep_save(value, connection)


# Tasks per statement of a bulk submission on PostgreSQL (see `postgresql_submit_many`).
SUBMIT_CHUNK = 100


def postgresql_submit_many(
    tasks: QuerySet[_Row],
    chunks: Iterable[Sequence[dict[str, Any]]],
    capped: set[str] | None = None,
) -> set[str]:
    """Insert chunks of validated rows (the SUBMITTED fields; a missing one takes its
    default), one statement per chunk, all in one transaction; return the rns inserted.
    The rows of a queue with a cap on ready tasks are left out (not inserted) and their rns
    added to `capped`: the caller submits them one at a time through the cap
    (`models.admission`).

    Each chunk travels as one JSON array, expanded by `jsonb_to_recordset` into `INSERT …
    SELECT … ON CONFLICT (rn) DO NOTHING` (no per-row parameters to bind); the other columns
    take their defaults. Each statement notifies READY_CHANNEL once per queue that got
    leasable tasks.

    `chunks` is taken one chunk at a time as the statements go out. Where the cursor binds its
    parameters on the server (see `prepared_cursor`), the statements go out in one pipeline:
    each is sent as soon as its chunk is ready, and nothing waits for a reply until the last
    one has gone, so a caller that validates its chunks lazily validates the next one while
    the server inserts the last. A chunk smaller than SUBMIT_CHUNK ends the batch: a single
    one is one statement in autocommit.
    """
    connection = connections[tasks.db]
    statement = _submission(tasks.model, tasks.db).many
    chunks = iter(chunks)
    first = next(chunks, None)
    if first is None:
        return set()
    left_out = set() if capped is None else capped
    if len(first) < SUBMIT_CHUNK:
        return _submit_chunks(connection, statement, [first], left_out)
    with transaction.atomic(using=tasks.db):
        if not prepares(connection) or not _pipeline_supported():
            return _submit_chunks(connection, statement, chain([first], chunks), left_out)
        with connection.wrap_database_errors, connection.connection.pipeline():
            cursors = [_send_chunk(connection, statement, first)]
            cursors += [_send_chunk(connection, statement, chunk) for chunk in chunks]
        return _inserted(cursors, left_out)


def _submit_chunks(
    connection: BaseDatabaseWrapper,
    statement: str,
    chunks: Iterable[Sequence[dict[str, Any]]],
    capped: set[str],
) -> set[str]:
    """Run the bulk submission `statement` for each chunk in turn; the rns inserted."""
    return _inserted([_send_chunk(connection, statement, chunk) for chunk in chunks], capped)


def _send_chunk(
    connection: BaseDatabaseWrapper, statement: str, rows: Sequence[dict[str, Any]]
) -> Any:
    """Execute the bulk submission `statement` for `rows` on a cursor of its own (which holds
    the rns inserted once the statement has run)."""
    cursor = prepared_cursor(connection, shared=False)
    cursor.execute(statement, [_submission_document(rows), READY_CHANNEL])
    return cursor


def _inserted(cursors: Sequence[Any], capped: set[str]) -> set[str]:
    """The rns the bulk submission statements of `cursors` inserted (closing the cursors);
    those they left out for their capped queues go to `capped`."""
    inserted: set[str] = set()
    for cursor in cursors:
        with cursor:
            for row in cursor.fetchall():
                (capped if row[2] else inserted).add(row[0])
    return inserted


@cache
def _pipeline_supported() -> bool:
    from psycopg import Pipeline

    return bool(Pipeline.is_supported())


def _submission_document(rows: Sequence[dict[str, Any]]) -> str:
    """`rows` as the JSON array the bulk submission statement expands (a task without keys
    names none of the key fields: the statement reads them as null)."""
    return json.dumps(
        [
            {
                "rn": row["rn"],
                "queue": row["queue"],
                "spec": row["spec"],
                "priority": row["priority"],
                "not_before": row["not_before"].isoformat() if row["not_before"] else None,
                "retry_policy": row.get("retry_policy"),
                "retry_of": row.get("retry_of"),
                "root": row.get("root"),
                "attempt": row.get("attempt", 1),
                **{name: row.get(name) for name in _KEY_FIELDS if "keys" in row},
                "timeout": _interval(row.get("timeout")),
                "expires_at": row["expires_at"].isoformat() if row.get("expires_at") else None,
                "batch_id": row.get("batch_id"),
                "parent": row.get("parent"),
                "notify": row.get("notify"),
                "version": row.get("version"),
                "fair_key": row.get("fair_key"),
            }
            for row in rows
        ],
        separators=(",", ":"),
    )


#: The SUBMITTED fields of a task with keys (`models.keys.key_values`).
_KEY_FIELDS = ("keys", "order_key", "order_seq", "order_block", "rate_cost")


def _interval(value: timedelta | None) -> str | None:
    """A duration as PostgreSQL reads an interval from JSON text: whole microseconds, exact
    and never in a float's exponent form ("1e-05 seconds" is not an interval)."""
    return None if value is None else f"{value // timedelta(microseconds=1)} microseconds"


def can_insert_returning_on_conflict(connection: BaseDatabaseWrapper) -> bool:
    """Whether `insert_ignoring_duplicates` runs on `connection` (PostgreSQL, SQLite)."""
    return returns_written_rows(connection)


def insert_ignoring_duplicates(tasks: QuerySet[_Row], batch: Sequence[_Row]) -> set[str]:
    """Insert `batch` in one statement, skipping any whose rn exists; return the inserted rns."""
    connection = connections[tasks.db]
    fields, columns = _insert_parts(tasks)
    quote = connection.ops.quote_name
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params = [
        field.get_db_prep_save(getattr(obj, field.attname), connection)
        for obj in batch
        for field in fields
    ]
    statement = (
        f"INSERT INTO {quote(tasks.model._meta.db_table)} ({columns}) "
        f"VALUES {', '.join([row] * len(batch))} ON CONFLICT (rn) DO NOTHING RETURNING rn"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return {row[0] for row in cursor.fetchall()}
