"""Counting the rows of a big table without reading it all: the queues present, counts capped
per queue and status, and the PostgreSQL planner's estimates past the cap.

The metrics and the admin's paginator count through these; on SQLite and MySQL the counts are
exact (small deployments), on PostgreSQL each count stops at a cap and an estimate from the
table's statistics takes over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections, models
from django.db.models import QuerySet

from .vendors import has_planner_estimates, is_postgresql


def planned_rows(queryset: QuerySet[Any]) -> int | None:
    """How many rows `queryset` holds, as PostgreSQL's planner estimates it from EXPLAIN (kept
    current by autovacuum's ANALYZE); None on the databases without such estimates."""
    if not has_planner_estimates(queryset.db):
        return None
    plan = json.loads(queryset.order_by().explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])


def queues_present(tasks: QuerySet[Any]) -> list[str]:
    """Every queue that has a task of `tasks`' table: one index probe per queue, never a scan
    (a recursive walk of the queue index, on every vendor)."""
    connection = connections[tasks.db]
    table = connection.ops.quote_name(tasks.model._meta.db_table)
    sql = f"""
        WITH RECURSIVE queues(queue) AS (
            SELECT MIN(queue) FROM {table}
            UNION ALL
            SELECT (SELECT MIN(queue) FROM {table} WHERE queue > queues.queue)
            FROM queues WHERE queues.queue IS NOT NULL
        )
        SELECT queue FROM queues WHERE queue IS NOT NULL
    """
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [row[0] for row in cursor.fetchall()]


def capped_counts(
    tasks: QuerySet[Any], queues: Sequence[str], statuses: Sequence[str], cap: int
) -> dict[tuple[str, str], int]:
    """Tasks of `tasks`' table per (queue, status) pair: exact up to `cap`, else an estimate
    (never below the cap).

    PostgreSQL: one statement, a count stopped by LIMIT per pair, through the index; a pair
    that reaches the cap is estimated from the table's statistics (`estimator`). Elsewhere
    (small deployments): one exact, indexed count per pair.
    """
    connection = connections[tasks.db]
    if not is_postgresql(connection):
        plain = tasks.order_by()
        return {
            (queue, status): plain.filter(queue=queue, status=status).count()
            for queue in queues
            for status in statuses
        }
    table = connection.ops.quote_name(tasks.model._meta.db_table)
    sql = f"""
        SELECT q.queue, s.status, (
            SELECT count(*) FROM (
                SELECT 1 FROM {table} AS t
                WHERE t.queue = q.queue AND t.status = s.status LIMIT %s
            ) AS capped
        )
        FROM unnest(%s::text[]) AS q(queue) CROSS JOIN unnest(%s::text[]) AS s(status)
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [cap, list(queues), [str(s) for s in statuses]])
        exact = {(queue, status): count for queue, status, count in cursor.fetchall()}
    capped = [key for key, count in exact.items() if count >= cap]
    if capped:
        estimate = estimator(tasks.model, tasks.db)
        for key in capped:
            exact[key] = max(cap, estimate(*key))
    return exact


def estimator(model: type[models.Model], using: str) -> Callable[[str, str], int]:
    """How many rows of `model`'s table have a queue and a status, as PostgreSQL's planner
    would guess it.

    From the table's statistics (two queries, nothing else read): the row count in
    `pg_class`, and each column's most common values and their frequencies in `pg_stats`;
    a value outside them gets an even share of the rest. The two columns are taken as
    independent, as the planner does without extended statistics.
    """
    table = model._meta.db_table
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)",
            [connections[using].ops.quote_name(table)],
        )
        found = cursor.fetchone()
        rows = max(float(found[0]) if found else 0.0, 0.0)
        cursor.execute(
            "SELECT attname, most_common_vals::text::text[], most_common_freqs, null_frac, "
            "n_distinct FROM pg_stats WHERE tablename = %s AND attname IN ('queue', 'status') "
            "AND schemaname = ANY(current_schemas(false))",
            [table],
        )
        stats = {row[0]: row[1:] for row in cursor.fetchall()}

    def frequency(column: str, value: str) -> float:
        if column not in stats:
            return 1.0
        values, freqs, null_frac, n_distinct = stats[column]
        values, freqs = values or [], freqs or []
        if value in values:
            share: float = freqs[values.index(value)]
            return share
        distinct = n_distinct if n_distinct >= 0 else -n_distinct * rows
        others = max(distinct - len(values), 1.0)
        rest = max(1.0 - float(sum(freqs)) - float(null_frac or 0.0), 0.0)
        return rest / float(others)

    def estimate(queue: str, status: str) -> int:
        return round(rows * frequency("queue", queue) * frequency("status", status))

    return estimate
