"""Row-by-row UPDATEs of many rows in one call: one parameterised statement run with
`executemany` (psycopg sends the rows in a pipeline). Django's `bulk_update` builds a CASE per
field and row, which costs more in Python than the statements themselves for a few hundred
rows (the schedules' passes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, models
from django.db.models import sql

from .clock import Now


def _column(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    found = model._meta.get_field(name)
    if not isinstance(found, models.Field):
        raise TypeError(f"expected a models.Field, not {type(found).__name__}")
    return found


def update_each(
    objects: Sequence[models.Model], fields: Sequence[str], using: str, stamp: str | None = None
) -> None:
    """Write `fields` of each of `objects` (their in-memory values) to its row, by primary key;
    `stamp`, if given, is a field set to the database clock in the same statement."""
    if not objects:
        return
    model = type(objects[0])
    connection = connections[using]
    quote = connection.ops.quote_name
    columns = [_column(model, name) for name in fields]
    sets = [f"{quote(str(c.column))} = %s" for c in columns]
    params: list[Any] = []
    if stamp is not None:
        compiled, params = (
            sql.Query(None).get_compiler(using).compile(Now(output_field=models.DateTimeField()))
        )
        sets.append(f"{quote(str(_column(model, stamp).column))} = {compiled}")
    key = quote(str(model._meta.pk.column)) if model._meta.pk else quote("id")
    statement = f"UPDATE {quote(model._meta.db_table)} SET {', '.join(sets)} WHERE {key} = %s"
    rows = [
        [c.get_db_prep_save(getattr(o, c.attname), connection) for c in columns]
        + list(params)
        + [o.pk]
        for o in objects
    ]
    with connection.cursor() as cursor:
        cursor.executemany(statement, rows)


def add_each(
    model: type[models.Model], field: str, amounts: Sequence[tuple[int, Any]], using: str
) -> None:
    """Add each `(amount, pk)` of `amounts` to `field` of the row `pk`."""
    if not amounts:
        return
    connection = connections[using]
    quote = connection.ops.quote_name
    column = quote(str(_column(model, field).column))
    key = quote(str(model._meta.pk.column)) if model._meta.pk else quote("id")
    statement = (
        f"UPDATE {quote(model._meta.db_table)} SET {column} = {column} + %s WHERE {key} = %s"
    )
    with connections[using].cursor() as cursor:
        cursor.executemany(statement, [list(pair) for pair in amounts])
