"""Aggregates that only some vendors have in SQL: callers ask `vendors` first and compute the
same figure in Python elsewhere."""

from __future__ import annotations

from typing import Any

import django
from django.db.models import Aggregate, DurationField


class Percentile(Aggregate):
    """PostgreSQL's `percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)`."""

    function = "percentile_cont"
    # Django 6 renders an aggregate's FILTER into `%(filter)s`; Django 5.2 appends it itself.
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)" + (
        "%(filter)s" if django.VERSION >= (6, 0) else ""
    )

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        super().__init__(
            expression, fraction=float(fraction), output_field=DurationField(), **extra
        )
