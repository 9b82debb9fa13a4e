"""The database clock: the `Now` expression every write uses, the `Clock` a transition stamps
its rows with, and `read_clock()`, the one reader of the database's time in Python.

Time is the database's, never this host's: leases, liveness, schedules and purges are all
measured on it. SQLite keeps timestamps as text; `Now` writes them there with microseconds, as
Django writes datetime parameters, so that stored times and parameters compare correctly as
text (Django's own `Now()` writes milliseconds there).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections, models
from django.db.models import Value, sql
from django.db.models.functions import Now as DjangoNow
from django.utils.deconstruct import deconstructible

from .vendors import is_postgresql


@deconstructible(path="scylla_django.db.Now")
class Now(DjangoNow):
    """The database clock (Django's `Now()`), with microseconds on SQLite too.

    Use it to read (it is the statement's start time on PostgreSQL, so indexes can use it).
    """

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # %f is "SS.SSS": pad it to the six digits Django gives datetime parameters.
        template = "STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f000', 'NOW')"
        return self.as_sql(compiler, connection, template=template, **extra_context)


#: The CTE of a PostgreSQL transition that holds its one reading of the clock.
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

    A set operation stamps its task rows and their History rows with this one value; the
    schedules tick on it. The value is what the ORM would read from a datetime column.
    """
    connection = connections[using]
    expression = Now(output_field=models.DateTimeField())
    statement, params = sql.Query(None).get_compiler(using).compile(expression)
    if is_postgresql(connection):
        statement, params = "clock_timestamp()", []
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {statement}", params)
        [value] = cursor.fetchone() or [None]
    for converter in connection.ops.get_db_converters(expression):
        value = converter(value, expression, connection)
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, not {type(value).__name__}")
    return value
