"""SQL only SQLite needs: looking inside a JSON list, which Django's JSON containment
(`__contains`) does not do on SQLite."""

from __future__ import annotations

from django.db import connections, models
from django.db.models.expressions import RawSQL


def sqlite_json_each(
    model: type[models.Model], field_name: str, condition: str, value: str
) -> RawSQL:
    """SQLite: some element of the JSON list in `field_name` meets `condition` (one %s, for
    `value`; the element is `json_each.value`)."""
    quote = connections["default"].ops.quote_name
    field = model._meta.get_field(field_name)
    if not isinstance(field, models.Field) or not field.column:
        raise TypeError(field_name)
    column = f"{quote(model._meta.db_table)}.{quote(field.column)}"
    return RawSQL(
        f"EXISTS (SELECT 1 FROM json_each({column}) WHERE {condition})",
        [value],
        output_field=models.BooleanField(),
    )
