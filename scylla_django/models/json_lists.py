"""Conditions on the JSON lists a model stores (a task's `errors`, a worker's `queues`): JSON
containment where the database has it, `json_each` on SQLite, which has none in Django."""

from __future__ import annotations

from django.db import connections, models
from django.db.models import Q
from django.db.models.expressions import RawSQL


def json_list_has(model: type[models.Model], field_name: str, value: str, using: str) -> Q:
    """`value` is an element of the JSON list in `field_name` (JSON containment; SQLite, which
    has none in Django, looks through `json_each`)."""
    if connections[using].vendor == "sqlite":
        return Q(sqlite_json_each(model, field_name, "json_each.value = %s", value))
    return Q(**{f"{field_name}__contains": [value]})


def sqlite_json_each(
    model: type[models.Model], field_name: str, condition: str, value: str
) -> RawSQL:
    """SQLite: some element of the JSON list in `field_name` meets `condition` (one %s)."""
    quote = connections["default"].ops.quote_name
    field = model._meta.get_field(field_name)
    assert isinstance(field, models.Field) and field.column, field_name
    column = f"{quote(model._meta.db_table)}.{quote(field.column)}"
    return RawSQL(
        f"EXISTS (SELECT 1 FROM json_each({column}) WHERE {condition})",
        [value],
        output_field=models.BooleanField(),
    )
