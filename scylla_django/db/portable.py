"""Queries every vendor runs, each behind one call that picks the vendor's way.

The JSON list tests (`__contains` where Django has it, `json_each` on SQLite), the
fenced UPDATE that returns the keys it wrote (`RETURNING` on PostgreSQL and SQLite, lock then
update elsewhere) and the shared lock of a fenced row until commit (`lock_rows`).
"""

from __future__ import annotations

from typing import Any, cast

from django.db import connections, models, transaction
from django.db.models import Q, QuerySet, sql

from .sqlite import sqlite_json_each
from .vendors import is_postgresql, is_sqlite, returns_written_rows


def json_list_contains(
    model: type[models.Model], field_name: str, element: str | dict[str, str], using: str
) -> Q:
    """Rows whose JSON list `field_name` has `element`: a string, or a one-key object matched
    by that key (`{"code": "timeout"}` matches an element `{"code": "timeout", …}`).

    JSON containment (`field__contains=[element]`) where Django has it; SQLite, which has none,
    looks through `json_each`.
    """
    if not is_sqlite(connections[using]):
        return Q(**{f"{field_name}__contains": [element]})
    if isinstance(element, str):
        return Q(sqlite_json_each(model, field_name, "json_each.value = %s", element))
    [(key, value)] = element.items()
    if not key.isidentifier():
        raise ValueError(f"{key!r} is not a plain JSON key")
    condition = f"json_extract(json_each.value, '$.{key}') = %s"
    return Q(sqlite_json_each(model, field_name, condition, value))


def update_returning_pks(fenced: QuerySet[Any], values: dict[str, Any]) -> set[int]:
    """Apply `values` to the rows `fenced` selects, in one statement; return their pks.

    PostgreSQL and SQLite (3.35+) return the updated keys from the UPDATE itself. Elsewhere the
    rows are locked and read first, then updated, in one transaction.
    """
    connection = connections[fenced.db]
    if not returns_written_rows(connection):
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


def upsert(
    model: type[models.Model],
    objs: list[Any],
    unique_fields: list[str],
    update_fields: list[str],
    using: str,
) -> None:
    """Insert `objs`, or update `update_fields` of the rows that already hold their
    `unique_fields`: `INSERT … ON CONFLICT (unique_fields) DO UPDATE` on PostgreSQL and SQLite;
    MySQL and MariaDB, which name no conflict target, update on any unique key
    (`ON DUPLICATE KEY UPDATE`)."""
    target = (
        unique_fields if connections[using].features.supports_update_conflicts_with_target else None
    )
    model._default_manager.using(using).bulk_create(
        objs, update_conflicts=True, unique_fields=target, update_fields=update_fields
    )


def lock_rows(fenced: QuerySet[Any]) -> bool:
    """Lock the rows `fenced` selects until the caller's transaction ends; whether there were
    any. Writes to them (a reset, a takeover) wait for that commit.

    PostgreSQL: one `SELECT … FOR SHARE` (other readers that share it are not held up).
    SQLite: an UPDATE that changes nothing takes the database's write lock, held to commit.
    Elsewhere: `SELECT … FOR UPDATE`. Call it inside a transaction.
    """
    connection = connections[fenced.db]
    if not connection.in_atomic_block:
        raise RuntimeError(
            "lock_rows() holds its lock until the caller commits: call it in a transaction"
        )
    if is_sqlite(connection):
        pk = fenced.model._meta.pk
        if pk is None:
            raise TypeError(f"{fenced.model.__name__} has no primary key to lock rows by")
        return bool(fenced.update(**{pk.attname: models.F(pk.attname)}))
    if not is_postgresql(connection):
        return bool(list(fenced.select_for_update().values_list("pk", flat=True)))
    query, params = fenced.values_list("pk", flat=True).query.get_compiler(fenced.db).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(f"{query} FOR SHARE", params)
        return cursor.fetchone() is not None
