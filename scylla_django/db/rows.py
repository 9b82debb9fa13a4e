"""Rows read with a raw statement, made what the ORM would have read: each field's database
converters (JSON, datetimes on SQLite, …) applied, found once per model, database and fields."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import connections, models


def concrete_fields(
    model: type[models.Model], names: Sequence[str]
) -> list[models.Field[Any, Any]]:
    """The concrete fields of `model` called `names`, in that order."""
    by_name = {f.name: f for f in model._meta.concrete_fields}
    return [by_name[name] for name in names]


def convert_rows(
    model: type[models.Model],
    using: str,
    fields: Sequence[models.Field[Any, Any]],
    rows: list[Any],
) -> list[Any]:
    """Apply the fields' database converters (JSON, …) to raw `rows`, as the ORM would."""
    converters = _converters(model, using, tuple(fields))
    if not converters:
        return rows
    connection = connections[using]
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
