"""PostgreSQL's single-statement transitions: a task's transition with its History row, the
lease (walks of the ready index, `FOR UPDATE SKIP LOCKED`), the worker's batched finish,
alone or with its next lease, and its batched heartbeat and yield (arrays: one statement and
a few parameters however many leases it holds).

Every transition is one statement. A lease walks the ready index once per requested queue that
is not paused (each walk ordered and limited, `FOR UPDATE SKIP LOCKED`), merges the walks, marks
the best `limit` rows running and writes their TaskAssignment rows; it also checks, in the same
statement, that the lessee is a registered worker that has not stopped. A worker's outcome and
its next lease can be one statement too. Times written by a transition are `clock_timestamp()`,
read after the statement's snapshot, so a transition that saw another one's commit is always
stamped after it. Statuses and event names come from `enums.TRANSITIONS` and reach the SQL as
parameters (the ready status, which a plan must see, as a literal).

The functions receive the queryset they work on, or `Tables` (the models whose tables the lease
and finish name), and never import the models.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, TypeVar, cast

from django.db import connections, models, transaction
from django.db.models import QuerySet, sql

from ..enums import TRANSITIONS, Operation
from .clock import CLOCK_CTE
from .floors import FLOOR_TABLE, walk_from_floor
from .keys import BUSY, crowded
from .notifications import READY_CHANNEL
from .prepared import prepared_cursor
from .rows import concrete_fields, convert_rows
from .tables import Tables

_Row = TypeVar("_Row", bound=models.Model)  # the Task model, which this room never imports


def postgresql_transition(
    fenced: QuerySet[_Row],
    history: type[models.Model],
    values: dict[str, Any],
    fields: Sequence[str],
    operation: Operation,
    notify: tuple[str, str] | None = None,
    worker: str | None = None,
) -> dict[str, Any] | None:
    """Apply `values` to the one row `fenced` selects and write its History row, in one statement.

    The fenced UPDATE (built by the ORM, so expressions such as `Clock()` compile as usual) gets a
    RETURNING clause; a data-modifying CTE inserts the History row `{event, owner, progress}`
    of `operation` from the updated row, stamped with the row's new `updated`. `notify` is
    `(channel, column)`: the statement also sends `pg_notify(channel, <column of the row>)`
    when that column is not null. `worker` is the worker the History row names when the write
    clears the owner (the row's new owner otherwise). Returns the new values of `fields`, or
    None if the fence matched no row (then nothing was written).
    """
    model = fenced.model
    event = TRANSITIONS[operation].event
    # Lock the row first (waiting for a concurrent writer if needed), then read the clock.
    lock_sql, lock_params = fenced.order_by().values("pk").query.sql_with_params()
    lock_sql += " FOR UPDATE"
    query = cast(sql.UpdateQuery, fenced.query.chain(sql.UpdateQuery))
    query.add_update_values(values)
    compiler = query.get_compiler(fenced.db)
    update_sql, params = compiler.as_sql()
    quote = compiler.connection.ops.quote_name
    extra = ["owner", "progress", "updated"] + ([notify[1]] if notify else [])
    returned = concrete_fields(model, list(dict.fromkeys([*fields, *extra])))
    columns = ", ".join(quote(str(f.column)) for f in returned)
    statement = (
        f"WITH locked AS MATERIALIZED ({lock_sql}), "
        f"{CLOCK_CTE} AS MATERIALIZED (SELECT clock_timestamp() AS now "
        "FROM (SELECT count(*) FROM locked) AS l), "
        f"changed AS ({update_sql} RETURNING {quote('id')}, {columns})"
    )
    args = [*lock_params, *params]
    if event is not None:
        statement += (
            f", logged AS (INSERT INTO {quote(history._meta.db_table)} "
            "(task_id, typ, worker, progress, time) "
            f"SELECT id, %s, COALESCE(%s, owner), progress, {quote('updated')} FROM changed)"
        )
        args += [event.value, worker]
    if notify is not None:
        column = quote(str(concrete_fields(model, [notify[1]])[0].column))
        statement += (
            f", notified AS (SELECT count(pg_notify(%s, {column})) AS n FROM changed "
            f"WHERE {column} IS NOT NULL)"
        )
        args.append(notify[0])
        statement += f" SELECT {columns}, (SELECT n FROM notified) FROM changed"
    else:
        statement += f" SELECT {columns} FROM changed"
    with compiler.connection.cursor() as cursor:
        cursor.execute(statement, args)
        rows = [row[: len(returned)] for row in cursor.fetchall()]
    if not rows:
        return None
    [row] = convert_rows(model, fenced.db, returned, rows)
    return {f.attname: value for f, value in zip(returned, row, strict=True)}


def postgresql_lease(
    tables: Tables,
    using: str,
    *,
    worker_id: int,
    worker: str,
    queues: Sequence[str],
    limit: int,
    lease_length: timedelta,
    timeouts: Sequence[timedelta | None],
    timeout_grace: timedelta,
    finish: Sequence[dict[str, Any]] = (),
    reservation: timedelta | None = None,
) -> tuple[dict[int, datetime], list[Any] | None]:
    """Lease up to `limit` tasks of `tables.task` on database `using` (PostgreSQL) for
    `worker` (its name; `worker_id` its key); None if the worker may not lease. With `finish`,
    first complete or abort those rows (as `postgresql_finish`) in the same statement. Returns
    the pks finished (each with its `updated`) and the tasks leased.

    `timeouts` are the run-time limits of the tasks of `queues` (in the same order) that set
    none of their own (None: no limit). A leased task with a limit gets `timeout_at = now +
    limit + timeout_grace` and a deadline no later than that: no lease nor heartbeat takes it
    past its limit (see `_lease_sql`).

    With a `reservation`, each lease is first a reservation: its deadline is now plus
    `reservation` (no later than the cap) and its `handler_started` false, until a heartbeat
    reports its handler's start (`postgresql_heartbeat`). Without, it is a full lease of
    `lease_length`, started from the first.

    For each requested queue that is not paused, a LATERAL subquery walks the ready index
    (queue, priority desc, turn, created, id) in order (`turn`: a fair share, `db.fairness`;
    0 elsewhere), skipping rows other lessees hold (`SKIP
    LOCKED`), rows whose `not_before` is still ahead and rows past their `expires_at`, and stops
    after `limit` rows; the walks are merged and cut to the best `limit`, so the cost depends on
    `limit` and the number of queues, not on the backlog, and priority-then-age order holds
    across queues. The locked rows that are not kept are released when the statement ends. The
    lessee must be a registered worker that has not stopped; otherwise nothing is leased and
    None is returned.

    Paused queues are skipped by the same statement (one probe of the queue settings per
    queue). If a requested queue has a running-task limit, that statement leases nothing and
    says so: the lease is then made in a transaction that first locks the limited queues'
    settings rows, then runs the statement again, which counts each limited queue's running
    tasks in its own snapshot (taken after the lock, so every earlier lease of that queue is
    counted) and walks at most the room left under the limit.

    Finishing and leasing in one statement is one round trip and one commit for a worker that
    ends a task and takes the next: the finished tasks and the leased ones change status in
    the same commit, so no snapshot sees the worker hold both. With a limited queue the
    outcomes are written by the first statement, and the lease is made under the lock after.
    """
    finishing = bool(finish)
    statement, params = lease_statement(tables, using, locked=False, finishing=finishing)
    params.update(worker_id=worker_id, worker=worker, queues=list(queues), limit=limit)
    params.update(lease_length=lease_length, locked=False, timeout_grace=timeout_grace)
    params["reservation"] = reservation
    params["timeouts"] = list(timeouts)
    if finishing:
        params["rows"] = json.dumps(list(finish))
    with prepared_cursor(connections[using]) as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    finished: dict[int, datetime] = {}
    skip = 2
    if finishing:  # the pks finished and their `updated`, after the first two columns
        finished = dict(zip(rows[0][2] or [], rows[0][3] or [], strict=True))
        skip = 4
    if rows[0][0] and rows[0][1]:  # a limited queue: lease again under its lock
        rows, skip = _lease_limited(tables, using, params), 2
    return finished, _leased(tables.task, using, rows, skip) if rows[0][0] else None


def _lease_limited(tables: Tables, using: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The lease of `postgresql_lease` when a requested queue has a running-task limit: in a
    transaction that first locks the limited queues' settings rows. Returns the lease
    statement's rows."""
    connection = connections[using]
    quote = connection.ops.quote_name
    statement, _ = lease_statement(tables, using, locked=True)
    with transaction.atomic(using=using), prepared_cursor(connection) as cursor:
        cursor.execute(
            f"SELECT 1 FROM {quote(tables.queue_setting._meta.db_table)} "
            "WHERE queue = ANY(%s) AND max_running IS NOT NULL AND NOT paused "
            "ORDER BY queue FOR UPDATE",
            [params["queues"]],
        )
        cursor.execute(statement, {**params, "locked": True})
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows


def _leased(model: type[_Row], using: str, rows: list[tuple[Any, ...]], skip: int) -> list[_Row]:
    """The tasks of a lease statement's `rows` (each row's task columns follow `skip` others;
    a row without a task, as when nothing was leased, is left out)."""
    fields = list(model._meta.concrete_fields)
    pk = skip + fields.index(model._meta.pk)  # null in the row without a task
    values = [row[skip:] for row in rows if row[pk] is not None]
    names = [f.attname for f in fields]
    return [model.from_db(using, names, row) for row in convert_rows(model, using, fields, values)]


def lease_statement(
    tables: Tables, using: str, *, locked: bool, finishing: bool = False
) -> tuple[str, dict[str, Any]]:
    """The lease statement of `postgresql_lease` (see `_lease_sql`), and a new dict of its
    fixed parameters."""
    statement, params = _lease_sql(tables, using, locked, finishing)
    return statement, dict(params)


@cache
def _lease_sql(
    tables: Tables, using: str, locked: bool, finishing: bool
) -> tuple[str, dict[str, Any]]:
    """The lease statement of `postgresql_lease` and the parameters that name statuses and
    events, and `reservation` (None; the caller adds the lessee, queues, limit, lease_length,
    `locked`, `timeouts` and `timeout_grace`, and may set `reservation`).

    A task leased with a run-time limit (its own `timeout`, else its queue's in `timeouts`)
    gets `timeout_at`, the lease's start plus the limit and `timeout_grace` on the clock the
    lease writes with, and a deadline no later than that; one without gets neither (a null
    `timeout_at`). Heartbeats never extend a deadline past `timeout_at`, so the lease of a
    worker frozen before its first heartbeat ends at the limit too.

    `finishing`: the statement first writes the outcomes of the `rows` parameter, with the
    CTEs of `finish_statement`, and its first row carries the pks finished and their `updated`
    (arrays, in the same order) after the first two columns (`postgresql_lease`'s `finish`);
    the other rows carry nulls there.

    Each queue's walk is limited by the `limit` parameter itself, which the planner sees: its
    estimate of the statement stays small (a walk limited by a column is costed as a tenth of
    the queue, which, at a million rows over 50 queues, crossed `jit_above_cost` and compiled
    the statement on every lease). Locked, each walk is read through a second limit, the
    queue's room: it stops there, so no row past the room is locked, and the second limit,
    being over at most `limit` rows, costs nothing that grows with the backlog.
    """
    transition = TRANSITIONS[Operation.LEASE]
    [source] = transition.sources
    connection = connections[using]
    quote = connection.ops.quote_name
    task_table = quote(tables.task._meta.db_table)
    history_table = quote(tables.history._meta.db_table)
    fields = list(tables.task._meta.concrete_fields)
    columns = ", ".join(f"t.{quote(str(f.column))}" for f in fields)
    # The ready status is written into the statement, not bound: the statement is prepared, and
    # a generic plan must still see `status = 'ready'` to walk the partial ready index.
    ready = _literal(source.value)
    finish, params = _finish_ctes(tables, using) if finishing else ("", {})
    # The finished pks and times ride on the first row only: repeated on every leased row, they
    # were sent and read (a timestamp parsed per finished task per leased task) once per row.
    first = "row_number() OVER (ORDER BY t.priority DESC, t.turn ASC, t.created ASC, t.id ASC) = 1"
    finished = (
        f"CASE WHEN {first} THEN (SELECT array_agg(id ORDER BY id) FROM changed) END, "
        f"CASE WHEN {first} THEN (SELECT array_agg(updated ORDER BY id) FROM changed) END, "
        if finishing
        else ""
    )
    # `gate`: the requested queues that are not paused, each with the room it has (`budget`):
    # `limit`, or for a limited queue what is left under its limit (counted only when locked),
    # and the run-time limit of its tasks that set none (`timeout`).
    # `cap`: the time past which the task's lease is never extended (null: no run-time limit).
    cap = (
        "clock.now + COALESCE(t.timeout, (SELECT g.timeout FROM gate AS g "
        "WHERE g.name = t.queue)) + %(timeout_grace)s::interval"
    )
    # Each queue's walk, from its floor (`db.floors`): the ready tasks in lease order, but
    # those not yet due, past their expiry, with keys that look busy or locked by another lease.
    walk = walk_from_floor(
        "t.ctid, t.id, t.priority, t.turn, t.created, t.keys",
        task_table,
        f"""t.status = {ready} AND t.queue = q.name
            AND (t.not_before IS NULL OR t.not_before <= statement_timestamp())
            -- A task past its expiry is never leased (the monitor cancels it).
            AND (t.expires_at IS NULL OR t.expires_at > statement_timestamp())
            -- A task whose keys look busy is passed over (the take trigger decides).
            AND (t.keys IS NULL OR NOT {BUSY})
            AND EXISTS (SELECT 1 FROM lessee)
            AND (%(locked)s OR NOT EXISTS (SELECT 1 FROM gate WHERE limited))""",
        "ORDER BY t.priority DESC, t.turn ASC, t.created ASC, t.id ASC "
        "LIMIT %(limit)s FOR UPDATE OF t SKIP LOCKED",
    )
    statement = f"""
        WITH {finish + ", " if finish else ""}lessee AS MATERIALIZED (
            SELECT 1 FROM {quote(tables.worker._meta.db_table)}
            WHERE id = %(worker_id)s AND stopped IS NULL
        ), gate AS MATERIALIZED (
            SELECT q.name, s.max_running IS NOT NULL AS limited,
                CASE WHEN s.max_running IS NULL THEN %(limit)s
                     WHEN NOT %(locked)s THEN 0
                     ELSE GREATEST(0, LEAST(%(limit)s, s.max_running - (
                        SELECT count(*) FROM {task_table} AS r
                        WHERE r.status = %(target)s AND r.queue = q.name)))
                END AS budget,
                q.timeout, f.priority AS floor_priority, f.turn AS floor_turn,
                f.created AS floor_created, f.id AS floor_id
            FROM unnest(%(queues)s::text[], %(timeouts)s::interval[]) AS q(name, timeout)
            LEFT JOIN {quote(tables.queue_setting._meta.db_table)} AS s ON s.queue = q.name
            -- Where the queue's walk starts (`db.floors`; none: at the head of the index).
            LEFT JOIN {FLOOR_TABLE} AS f ON f.queue = q.name
            WHERE s.paused IS NOT TRUE
        ), picked AS MATERIALIZED (
            SELECT c.ctid, c.id, c.priority, c.turn, c.created, c.keys FROM gate AS q
            CROSS JOIN LATERAL (
                SELECT * FROM ({walk}) AS w LIMIT {"q.budget" if locked else "%(limit)s"}
            ) AS c
            ORDER BY c.priority DESC, c.turn ASC, c.created ASC, c.id ASC
            LIMIT %(limit)s
        ), crowded AS MATERIALIZED (
            -- The candidates with keys that those ahead of them in lease order crowd out of a
            -- key (`keys.crowded`): the trigger judges the rows in the UPDATE's order (by tuple
            -- id, not lease order), so without this a later candidate could take the room of
            -- an earlier one. A window cannot sit beside FOR UPDATE, hence a level of its own;
            -- a row crowded out stays locked until the lease commits, as a row the walk took
            -- beyond `limit` does. Read only when a candidate has keys.
            {crowded("picked")}
        ), clock AS MATERIALIZED (
            -- Read once the rows are locked, so after every commit the lease could see.
            SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM picked) AS p
        ), leased AS (
            UPDATE {task_table} AS t
            SET status = %(target)s, owner = %(worker)s,
                -- LEAST passes over a null: a task without a run-time limit has no cap. With
                -- a reservation, the lease lasts that long until its handler's start is known.
                deadline = LEAST(
                    clock.now + COALESCE(%(reservation)s::interval, %(lease_length)s), {cap}),
                handler_started = %(reservation)s::interval IS NULL,
                timeout_at = {cap},
                lease_length = %(lease_length)s, leases = t.leases + 1, updated = clock.now
            FROM clock
            -- The rows `picked` locked, by their tuple ids: a TID scan, whatever the planner
            -- knows of the table (joined by key and re-filtered by status, a table without
            -- statistics yet was walked whole through the ready index). They are still ready:
            -- FOR UPDATE re-checked the status when it locked them, and they stay locked.
            WHERE t.ctid = ANY(ARRAY(
                SELECT p.ctid FROM picked AS p
                WHERE p.keys IS NULL
                   OR NOT EXISTS (SELECT 1 FROM crowded AS c WHERE c.ctid = p.ctid)))
            RETURNING {columns}
        ), assigned AS (
            INSERT INTO {history_table} (task_id, typ, worker, progress, time)
            SELECT id, %(event)s, owner, NULL, updated FROM leased
        )
        SELECT (SELECT count(*) FROM lessee),
            NOT %(locked)s AND EXISTS (SELECT 1 FROM gate WHERE limited), {finished}t.*
        FROM (SELECT 1) AS one
        LEFT JOIN leased AS t ON true
        ORDER BY t.priority DESC, t.turn ASC, t.created ASC, t.id ASC
    """
    # No reservation unless the caller gives one: a full lease, started from the first.
    params.update(target=transition.target.value, event=transition.recorded.value, reservation=None)
    return compact(statement), params


def compact(statement: str) -> str:
    """`statement` without its comments (`-- …` to the end of a line) and with single spaces.

    Shorter on the wire, and short enough for psycopg to keep its parsed form: it parses a
    statement of over 4 kB again on every call. The statements given here quote no text that
    holds two hyphens or runs of spaces.
    """
    lines = (line.split("--", 1)[0] for line in statement.splitlines())
    return " ".join(" ".join(lines).split())


def _literal(word: str) -> str:
    """A status or event name as an SQL string literal (they are plain lowercase words)."""
    if not (word.isidentifier() and word.isascii()):
        raise ValueError(f"{word!r} is not a plain word and cannot be an SQL literal")
    return f"'{word}'"


def postgresql_finish(
    tables: Tables, using: str, worker: str, rows: Sequence[dict[str, Any]]
) -> dict[int, datetime]:
    """Complete or abort several leases of `worker` in one statement (PostgreSQL).

    `rows` are `{id, lease, status, result, errors, cpu_time, peak_memory, log}` with the
    target status of the complete or abort transition (what the handler's run used, and its
    stored log's name if it logged anything). Each task is
    fenced on its lease (the transitions' source status, owner, lease number); a
    data-modifying CTE writes the completion or abort History row of each one that matched.
    Returns the pks written, each with its `updated`.
    """
    statement, params = finish_statement(tables, using)
    params.update(rows=json.dumps(list(rows)), worker=worker)
    with prepared_cursor(connections[using]) as cursor:
        cursor.execute(statement, params)
        return dict(cursor.fetchall())


def finish_statement(tables: Tables, using: str) -> tuple[str, dict[str, Any]]:
    """The batched finish statement of `postgresql_finish` and a new dict of its fixed
    parameters (`rows` and `worker` are the caller's)."""
    ctes, params = _finish_ctes(tables, using)
    return compact(f"WITH {ctes} SELECT id, updated FROM changed"), dict(params)


@cache
def _finish_ctes(tables: Tables, using: str) -> tuple[str, dict[str, Any]]:
    """The CTEs of the batched finish (`outcome`, `changed`: the rows written, `logged`), and
    their fixed parameters (not to be changed: the caller copies them)."""
    complete, abort = TRANSITIONS[Operation.COMPLETE], TRANSITIONS[Operation.ABORT]
    [source] = complete.sources | abort.sources
    quote = connections[using].ops.quote_name
    task, history = quote(tables.task._meta.db_table), quote(tables.history._meta.db_table)
    batch = quote(tables.batch._meta.db_table)
    ctes = f"""outcome AS (
            SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb)
                AS o(id bigint, lease integer, status text, result jsonb, errors jsonb,
                      cpu_time double precision, peak_memory bigint, log text)
        ), changed AS (
            UPDATE {task} AS t
            SET status = o.status,
                progress = CASE WHEN o.status = %(completed)s THEN 1.0 ELSE t.progress END,
                result = CASE WHEN o.status = %(completed)s THEN o.result ELSE t.result END,
                errors = CASE WHEN o.status = %(completed)s THEN t.errors ELSE o.errors END,
                cpu_time = o.cpu_time, peak_memory = o.peak_memory,
                log = COALESCE(o.log, t.log),
                deadline = NULL, updated = statement_timestamp()
            FROM outcome AS o
            -- Found by key, then fenced on the lease (running, owned by the worker, the same
            -- lease number). The fence is written with IS NOT DISTINCT FROM (the same test here:
            -- none of the values is NULL) because no index answers it: a worker's finished
            -- tasks keep its name, and a plan that found the rows through the owner (or the
            -- running) index, or walked a table without statistics, read every task the
            -- worker had ever finished, on every finish. A row changed by a concurrent
            -- transaction is re-checked, fence included, on its new version.
            WHERE t.id = ANY(ARRAY(SELECT id FROM outcome)) AND t.id = o.id
              AND (t.status, t.owner, t.leases)
                IS NOT DISTINCT FROM (%(running)s, %(worker)s, o.lease)
            RETURNING t.id, t.status, t.progress, t.updated, t.batch_id
        ), logged AS (
            INSERT INTO {history} (task_id, typ, worker, progress, time)
            SELECT id, CASE WHEN status = %(completed)s THEN %(completion)s ELSE %(abort)s END,
                   %(worker)s, progress, statement_timestamp()
            FROM changed
        ), counted AS (
            -- The batches' counters (models.batches): completions here; an abort counts
            -- once its retry is decided, in the caller's transaction.
            UPDATE {batch} AS b SET completed = b.completed + c.n
            FROM (SELECT batch_id, count(*) AS n FROM changed
                  WHERE batch_id IS NOT NULL AND status = %(completed)s
                  GROUP BY batch_id ORDER BY batch_id) AS c
            WHERE b.id = c.batch_id
        )
    """
    params: dict[str, Any] = {
        "completed": complete.target.value,
        "running": source.value,
        "completion": complete.recorded.value,
        "abort": abort.recorded.value,
    }
    return ctes, params


def postgresql_heartbeat(
    tables: Tables,
    using: str,
    worker: str,
    leases: Sequence[tuple[int, int, float | None, bool]],
    lease_length: timedelta,
    reservation: timedelta | None = None,
    cursors: Cursors | None = None,
) -> set[int]:
    """Extend leases of `worker` in one statement (PostgreSQL); return the pks extended.

    `leases` are `(pk, lease number, progress or None, whether the handler has started)`. They
    travel as four arrays, so the statement is the same, and its parameters eight, however
    many leases a worker holds (a statement with a pair of parameters per lease outgrew
    PostgreSQL's 65,535 parameters at 32,767 leases, and its text grew with them). Each row
    is fenced as a single heartbeat is (running, owned by `worker`, the same lease number,
    not yielded). A lease whose handler has started (reported now, or known before) becomes
    a full lease, `handler_started`: its deadline is now plus `lease_length`; one whose
    handler has not, a reservation of now plus `reservation` (`lease_length` if None). Never
    past its `timeout_at` (the run-time limit its lease was given); a progress that is not
    None is written.

    `cursors` ride the same statement: the checkpoints the handlers made since the last
    heartbeat (`ctx.checkpoint()`), written into `cursors.table` (the steps) for the leases
    it extends only, so a refused lease writes none.
    """
    if not leases:
        return set()
    pks, numbers, progress, started = (list(column) for column in zip(*leases, strict=True))
    if cursors is not None and cursors.rows:
        statement = _heartbeat_with_cursors_sql(tables, using, cursors.table, cursors.name)
        params: dict[str, Any] = {"running": _running(Operation.HEARTBEAT)}
        ids, values, sizes = (list(column) for column in zip(*cursors.rows, strict=True))
        params.update(cursor_ids=ids, cursor_values=values, cursor_sizes=sizes)
    else:
        statement, params = heartbeat_statement(tables, using)
    params.update(pks=pks, leases=numbers, progress=progress, started=started)
    params.update(length=lease_length, reservation=reservation)
    params["worker"] = worker
    # Not prepared: planned for its arrays on every call (a millisecond, once a heartbeat
    # interval). A generic plan cannot see how many leases the arrays hold; the one a worker's
    # session settled on walked every running task of the worker once per lease, 20 s for
    # 5,000 leases, where the plan made for the arrays joins them in one pass.
    with connections[using].cursor() as cursor:
        cursor.execute(statement, params)
        return {row[0] for row in cursor.fetchall()}


def heartbeat_statement(tables: Tables, using: str) -> tuple[str, dict[str, Any]]:
    """The batched heartbeat statement of `postgresql_heartbeat` and a new dict of its fixed
    parameters (the arrays, `length`, `reservation` and `worker` are the caller's)."""
    return _heartbeat_sql(tables, using), {"running": _running(Operation.HEARTBEAT)}


def postgresql_yield(
    tables: Tables, using: str, worker: str, leases: Sequence[tuple[int, int]]
) -> set[int]:
    """Give back leases of `worker` in one statement (PostgreSQL); return the pks yielded.

    `leases` are `(pk, lease number)`. Each row is fenced as `Task.yield_lease` fences it
    (running, owned by `worker`, the same lease number) and gets, as there, a deadline a second
    in the past (or its `timeout_at`, if that is earlier) and a TaskYield History row; the
    queues of the tasks yielded are notified on the ready channel once each.
    """
    if not leases:
        return set()
    pks, numbers = (list(column) for column in zip(*leases, strict=True))
    event = TRANSITIONS[Operation.YIELD].recorded
    with connections[using].cursor() as cursor:  # planned for its arrays (see the heartbeat)
        cursor.execute(
            _yield_sql(tables, using),
            {
                "pks": pks,
                "leases": numbers,
                "worker": worker,
                "running": _running(Operation.YIELD),
                "event": event.value,
                "channel": READY_CHANNEL,
            },
        )
        return {row[0] for row in cursor.fetchall() if row[0] is not None}


def _running(operation: Operation) -> str:
    [source] = TRANSITIONS[operation].sources
    return source.value


@cache
def _heartbeat_sql(tables: Tables, using: str) -> str:
    quote = connections[using].ops.quote_name
    task = quote(tables.task._meta.db_table)
    return compact(f"""
        UPDATE {task} AS t
        -- Never past the run-time limit the lease was given (LEAST passes over a null): a
        -- lease that expires at it timed out, and the monitor aborts its task. A lease
        -- whose handler has not started stays a reservation.
        SET deadline = LEAST(statement_timestamp() + CASE
                WHEN t.handler_started OR h.started THEN %(length)s::interval
                ELSE COALESCE(%(reservation)s::interval, %(length)s::interval)
            END, t.timeout_at),
            handler_started = t.handler_started OR h.started,
            progress = COALESCE(h.progress, t.progress),
            updated = statement_timestamp()
        FROM unnest(%(pks)s::bigint[], %(leases)s::integer[], %(progress)s::double precision[],
                    %(started)s::boolean[])
             AS h(id, lease, progress, started)
        -- Fenced as a single heartbeat: running, owned by the worker, this lease, not yielded.
        WHERE t.id = h.id AND t.leases = h.lease AND t.status = %(running)s
          AND t.owner = %(worker)s AND t.deadline >= t.updated
        RETURNING t.id
    """)


@dataclass(frozen=True)
class Cursors:
    """Checkpoints to write with a heartbeat (`postgresql_heartbeat`): `rows` of (task pk,
    the cursor as JSON text, its size in bytes), into the steps table `table` as the step
    named `name` of each task."""

    table: str
    name: str
    rows: Sequence[tuple[int, str, int]]


@cache
def _heartbeat_with_cursors_sql(tables: Tables, using: str, table: str, name: str) -> str:
    """The heartbeat statement, writing the checkpoints of the leases it extends too."""
    quote = connections[using].ops.quote_name
    beat = _heartbeat_sql(tables, using).replace("RETURNING t.id", "RETURNING t.id, t.leases")
    steps = quote(table)
    literal = "'" + name.replace("'", "''") + "'"
    return compact(f"""
        WITH beat AS ({beat}), saved AS (
            INSERT INTO {steps} (task_id, name, result, size, lease, time)
            SELECT c.id, {literal}, c.value::jsonb, c.size, beat.leases, statement_timestamp()
            FROM unnest(%(cursor_ids)s::bigint[], %(cursor_values)s::text[],
                        %(cursor_sizes)s::integer[]) AS c(id, value, size)
            JOIN beat ON beat.id = c.id
            ON CONFLICT (task_id, name) DO UPDATE SET result = EXCLUDED.result,
                size = EXCLUDED.size, lease = EXCLUDED.lease, time = EXCLUDED.time
        )
        SELECT id FROM beat
    """)


@cache
def _yield_sql(tables: Tables, using: str) -> str:
    quote = connections[using].ops.quote_name
    task, history = quote(tables.task._meta.db_table), quote(tables.history._meta.db_table)
    return compact(f"""
        WITH changed AS (
            UPDATE {task} AS t
            -- Never past the run-time limit (LEAST passes over a null): a lease given back
            -- after it ran into its limit stays one that timed out.
            SET deadline = LEAST(statement_timestamp() - interval '1 second', t.timeout_at),
                updated = statement_timestamp()
            FROM unnest(%(pks)s::bigint[], %(leases)s::integer[]) AS y(id, lease)
            WHERE t.id = y.id AND t.leases = y.lease AND t.status = %(running)s
              AND t.owner = %(worker)s
            RETURNING t.id, t.owner, t.progress, t.updated, t.queue
        ), logged AS (
            INSERT INTO {history} (task_id, typ, worker, progress, time)
            SELECT id, %(event)s, owner, progress, updated FROM changed
        ), notified AS (
            SELECT count(pg_notify(%(channel)s, queue)) AS n
            FROM (SELECT DISTINCT queue FROM changed) AS q
        )
        SELECT id FROM changed
        UNION ALL SELECT NULL FROM notified WHERE n < 0
    """)


def postgresql_reset(
    tables: Tables, using: str, ids: Sequence[int], max_leases: int | None
) -> tuple[datetime | None, dict[int, str]]:
    """Judge the expired leases `ids` (already locked by the caller's transaction) and make the
    expired and the yielded ones ready, in one statement (PostgreSQL); return the clock it
    wrote with and each task's kind: `expired`, `unstarted`, `yielded`, `timed_out` or
    `exhausted`.

    A task whose lease ended at its run-time limit (`deadline = timeout_at`: a lease, a
    heartbeat or a yield capped there) is `timed_out`, given back or not. Another is `yielded`
    if its last History row is a TaskYield; only a task whose deadline is before its own
    `updated` can be (`models.NOT_YIELDED`: no other write sets it so, while a capped
    heartbeat past its limit can), so History is looked at for those alone, one step back
    through its (task, id) index each. One whose handler was not known to have started
    (`handler_started` false: a reservation) is `unstarted`, never counted. One that has had
    `max_leases` leases, snoozes, yields (its TaskYield rows, counted through the same index)
    and unstarted leases not counted, `exhausted`; the others `expired`. Of the unstarted
    leases, the first counts (`unstarted - 1` are left out): its handler may have started and
    killed its worker before a heartbeat could tell, and every later lease of the task records
    its start before its handler runs (see `expiry.expiry_kind`). The expired,
    unstarted and yielded ones are made ready (owner, deadline and limit cleared, progress 0;
    an unstarted one's `unstarted` up by one), fenced on still running with a deadline before
    the clock, read once after the caller's locks; each expired and unstarted one gets its
    TaskTimeout{owner, progress} row, and the queues made leasable are notified on the ready
    channel. The timed-out and exhausted ones are left to the caller
    (aborted, then perhaps retried). A task that is no longer a running expired lease is
    missing from the result; with none left the clock is None.

    Read in a statement of its own after the rows were locked, History holds every yield
    committed before the locks (one that committed after this statement's snapshot but
    before its lock would otherwise be missed).
    """
    if not ids:
        return None, {}
    reset = TRANSITIONS[Operation.RESET]
    yielded = TRANSITIONS[Operation.YIELD].recorded
    with connections[using].cursor() as cursor:  # planned for its array, as the heartbeat
        cursor.execute(
            _reset_sql(tables, using),
            {
                "ids": list(ids),
                "max_leases": max_leases,
                "running": _running(Operation.RESET),
                "ready": reset.target.value,
                "timeout": reset.recorded.value,
                "yield": yielded.value,
                "channel": READY_CHANNEL,
            },
        )
        rows = [row for row in cursor.fetchall() if row[0] is not None]
    return (rows[0][2] if rows else None), {row[0]: row[1] for row in rows}


@cache
def _reset_sql(tables: Tables, using: str) -> str:
    quote = connections[using].ops.quote_name
    task, history = quote(tables.task._meta.db_table), quote(tables.history._meta.db_table)
    return compact(f"""
        WITH clock AS MATERIALIZED (
            SELECT clock_timestamp() AS now
        ), judged AS MATERIALIZED (
            SELECT t.id, t.owner, t.progress, t.queue,
                CASE
                    WHEN t.deadline = t.timeout_at THEN 'timed_out'
                    WHEN t.deadline < t.updated AND (
                        SELECT h.typ FROM {history} AS h WHERE h.task_id = t.id
                        ORDER BY h.id DESC LIMIT 1
                    ) = %(yield)s THEN 'yielded'
                    WHEN NOT t.handler_started THEN 'unstarted'
                    WHEN %(max_leases)s::integer IS NOT NULL
                      AND t.leases - t.snoozes - GREATEST(t.unstarted - 1, 0) - (
                        SELECT count(*) FROM {history} AS h
                        WHERE h.task_id = t.id AND h.typ = %(yield)s
                    ) >= %(max_leases)s::integer THEN 'exhausted'
                    ELSE 'expired'
                END AS kind
            FROM {task} AS t, clock
            WHERE t.id = ANY(%(ids)s::bigint[]) AND t.status = %(running)s
              AND t.deadline < clock.now
        ), changed AS (
            UPDATE {task} AS t
            SET status = %(ready)s, owner = NULL, deadline = NULL, timeout_at = NULL,
                progress = 0.0, updated = clock.now,
                unstarted = t.unstarted + CASE WHEN t.id = ANY(ARRAY(
                    SELECT id FROM judged WHERE kind = 'unstarted')) THEN 1 ELSE 0 END
            FROM clock
            -- Fenced as the judgement was: still running, the lease still expired.
            WHERE t.id = ANY(ARRAY(
                    SELECT id FROM judged WHERE kind IN ('expired', 'unstarted', 'yielded')))
              AND t.status = %(running)s AND t.deadline < clock.now
            RETURNING t.id
        ), logged AS (
            INSERT INTO {history} (task_id, typ, worker, progress, time)
            SELECT j.id, %(timeout)s, j.owner, j.progress, clock.now
            FROM judged AS j JOIN changed AS c ON c.id = j.id, clock
            WHERE j.kind IN ('expired', 'unstarted')
            ORDER BY j.id
        ), notified AS (
            SELECT count(pg_notify(%(channel)s, q.queue)) AS n FROM (
                SELECT DISTINCT j.queue FROM judged AS j JOIN changed AS c ON c.id = j.id
            ) AS q
        )
        SELECT j.id, j.kind, clock.now FROM judged AS j, clock
        WHERE j.kind IN ('timed_out', 'exhausted') OR j.id IN (SELECT id FROM changed)
        UNION ALL SELECT NULL, NULL, NULL FROM notified WHERE n < 0
    """)
