"""Lease floors (PostgreSQL): per queue, a position in the ready index's order before which no
ready task sorts, so that a lease starts its walk there instead of at the head of the index.

Why. A lease marks its tasks running: their entries in the ready index (queue, priority desc,
turn, created, id, where ready) now point at row versions that are no longer ready. A scan
that passes such an entry marks it dead, and later scans skip it without reading the row;
but it may do so only when no transaction can still see the old version. While something
pins the MVCC horizon (a transaction left open, a long REPEATABLE READ report), nothing is
marked and nothing is vacuumed, so every lease walks the entries of every task leased since
the pin began, at the head of the index, and reads each one's row. The lease slows with the
pin's age (docs/discussions/performance-pressure.md). A floor lets the lease skip them.

The floor of a queue is a row of `lease_floor` (`FLOOR_TABLE`): a position `(priority, turn,
created, id)` in the ready index's order, or the priority -1 when the queue had no ready task
(every task sorts before it). What holds, in every snapshot: no ready task of the queue sorts
before its floor. Correctness never depends on how far the floor is: a lease walks from it,
and without a floor row it walks the whole index as before.

- Lowered by every write that makes a task ready: a trigger on the task table (a new task, a
  retry, a reset lease, a snooze, a change of queue, priority or turn of a ready task) moves
  the floor back to the task when the task sorts before it, in the writer's transaction, so
  the task and the lower floor are seen together.
- Raised by `raise_floors`, at most once a second per queue, to the first ready task in
  index order (any ready task: one still waiting for its `not_before`, one whose keys are busy,
  one locked by another lease all hold the floor where they are).

A raise must not pass a ready task it cannot see yet: one written by a transaction still in
progress, whose trigger found the floor low enough and left it. So each trigger holds a shared
advisory lock of the queue until its transaction ends, and a raise first takes the exclusive
one (waiting a moment at most, `LOCK_WAIT`: a queue whose writers stay in flight longer keeps
its floor until the next raise), then reads the first ready task in a statement of its own,
whose snapshot sees every writer that held the lock. A writer that comes after waits for
the raise's commit and compares with the new floor: its statement's snapshot, taken after
the lock, sees it (at READ COMMITTED; at REPEATABLE READ and above it first locks the floor
row, and a floor raised since its snapshot makes it fail with a serialization error, to be
retried as any such conflict).

The portable path (SQLite, MariaDB) has no floors: its lease walks as it always did.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from django.db import OperationalError, connections, transaction

from .vendors import is_postgresql

#: The floors' table (one row per queue that has been raised once).
FLOOR_TABLE = "scylla_django_lease_floor"

#: How often a process raises the floors of the queues it leases from, in seconds. Between two
#: raises a lease walks at most the entries of the tasks leased since the last one.
RAISE_EVERY = 1.0

#: How long a raise waits for the writers in flight on its queue, in seconds (writers that come
#: meanwhile wait behind it).
LOCK_WAIT = 0.2
_LOCK_TIMEOUT = f"{int(LOCK_WAIT * 1000)}ms"
_LOCK_NOT_AVAILABLE = "55P03"

#: The namespace of the floors' advisory locks (`pg_advisory_xact_lock_shared` on the 64-bit
#: hash of this and the queue's name), so that they meet no other lock.
_NAMESPACE = "scylla_django.lease_floor:"

#: A priority above any task's (priorities are small integers): "no floor" in the lease's walk.
ABOVE_ALL = 32768

# The trigger, in the task table's statements: on a new ready task, and on any update that
# leaves a task ready with its status, queue, priority, turn or created set.
_POSTGRESQL_INSTALL = [
    f"""
    CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (
        queue varchar(255) PRIMARY KEY,
        priority integer NOT NULL,
        turn double precision,
        created timestamp with time zone,
        id bigint,
        raised timestamp with time zone NOT NULL DEFAULT clock_timestamp()
    )
    """,
    f"""
    CREATE OR REPLACE FUNCTION scylla_lower_lease_floor() RETURNS trigger
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        -- Held until this transaction ends: no raise passes this task before it is seen.
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('{_NAMESPACE}' || NEW.queue, 0));
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            -- A floor raised since this transaction's snapshot: a serialization failure.
            PERFORM 1 FROM {FLOOR_TABLE} WHERE queue = NEW.queue FOR SHARE;
        END IF;
        -- A statement of its own, so a snapshot taken after the lock (READ COMMITTED).
        UPDATE {FLOOR_TABLE}
        SET priority = NEW.priority, turn = NEW.turn, created = NEW.created, id = NEW.id
        WHERE queue = NEW.queue
          AND (priority < NEW.priority
               OR (priority = NEW.priority
                   AND (turn, created, id) > (NEW.turn, NEW.created, NEW.id)));
        RETURN NULL;
    END
    $$
    """,
    "DROP TRIGGER IF EXISTS scylla_lease_floor ON scylla_django_task",
    """
    CREATE TRIGGER scylla_lease_floor
    AFTER INSERT OR UPDATE OF status, queue, priority, turn, created ON scylla_django_task
    FOR EACH ROW WHEN (NEW.status = 'ready')
    EXECUTE FUNCTION scylla_lower_lease_floor()
    """,
]

_POSTGRESQL_REMOVE = [
    "DROP TRIGGER IF EXISTS scylla_lease_floor ON scylla_django_task",
    "DROP FUNCTION IF EXISTS scylla_lower_lease_floor()",
    f"DROP TABLE IF EXISTS {FLOOR_TABLE}",
]


def install_floors(apps: Any, schema_editor: Any) -> None:
    """Migration step: create the floors' table and the trigger that lowers them (PostgreSQL;
    a no-op elsewhere)."""
    if is_postgresql(schema_editor.connection):
        for statement in _POSTGRESQL_INSTALL:
            schema_editor.execute(statement, params=None)


def remove_floors(apps: Any, schema_editor: Any) -> None:
    """Migration step back: drop the trigger, its function and the table."""
    if is_postgresql(schema_editor.connection):
        for statement in _POSTGRESQL_REMOVE:
            schema_editor.execute(statement, params=None)


def walk_from_floor(columns: str, table: str, where: str, tail: str) -> str:
    """The lease's walk of one queue's ready tasks (alias `t`), from the floor in the gate row
    `q` (columns `floor_priority`, `floor_turn`, `floor_created`, `floor_id`; a null priority:
    no floor, the whole index).

    Two index range scans, in the index's order, one after the other: the tasks of the floor's
    priority from the floor on (a row comparison on turn, created, id: where the scan starts),
    then those of every lower priority. `where` is the rest of the walk's condition, `tail` its
    ORDER BY, LIMIT and locking clause (each scan has its own: a UNION takes none).
    """
    return (
        f"SELECT * FROM (SELECT {columns} FROM {table} AS t WHERE {where} "
        "AND t.priority = q.floor_priority "
        "AND (t.turn, t.created, t.id) >= (q.floor_turn, q.floor_created, q.floor_id) "
        f"{tail}) AS at_floor "
        f"UNION ALL SELECT * FROM (SELECT {columns} FROM {table} AS t WHERE {where} "
        f"AND t.priority < COALESCE(q.floor_priority, {ABOVE_ALL}) {tail}) AS below"
    )


#: When this process last raised the floors of a database's queues: (alias, queue) → time.
_raised: dict[tuple[str, str], float] = {}


def raise_floors_now_and_then(using: str, queues: Sequence[str]) -> None:
    """`raise_floors` for those of `queues` this process has not raised for `RAISE_EVERY`
    seconds; nothing inside a transaction (the raise holds its locks to the end of its own)."""
    connection = connections[using]
    if connection.in_atomic_block:
        return
    now = time.monotonic()
    due = [q for q in queues if now - _raised.get((using, q), -RAISE_EVERY) >= RAISE_EVERY]
    if due:
        for queue in due:
            _raised[(using, queue)] = now
        raise_floors(using, due)


def raise_floors(using: str, queues: Sequence[str]) -> list[str]:
    """Raise the floors of `queues` to their first ready task (the priority -1 when none is
    ready), each in a transaction of its own; returns the queues whose floor was looked at.

    Each raise first waits for the writers in flight on its queue (those that made a task ready
    in a transaction still in progress hold the queue's advisory lock), for at most
    `LOCK_WAIT`: writers that come meanwhile wait behind it, no longer. A queue whose writers
    do not finish by then is left as it is, until the next raise; so is one that another
    process raised less than `RAISE_EVERY` seconds ago. The floor row is written only
    when it moves and its last raise is a second old or more: under a pinned horizon every
    version of it stays, and each lease reads it.
    """
    connection = connections[using]
    if not is_postgresql(connection):
        return []
    looked = []
    for queue in queues:
        try:
            with transaction.atomic(using=using), connection.cursor() as cursor:
                # Each statement its own snapshot, whatever the connection's isolation level:
                # the raise's must be taken once the lock is held.
                cursor.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                # Raised within the second by another process: not again (writers would wait).
                cursor.execute(
                    f"SELECT 1 FROM {FLOOR_TABLE} WHERE queue = %s "
                    "AND raised > clock_timestamp() - make_interval(secs => %s)",
                    [queue, RAISE_EVERY],
                )
                if cursor.fetchone() is not None:
                    continue
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [_LOCK_TIMEOUT])
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [_NAMESPACE + queue]
                )
                cursor.execute(_RAISE, {"queues": [queue], "above": ABOVE_ALL})
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
                raise
        else:
            looked.append(queue)
    return looked


# The first ready task of each queue, from its floor on (the whole index without one), written
# as its new floor.
_RAISE = f"""
    INSERT INTO {FLOOR_TABLE} AS f (queue, priority, turn, created, id)
    SELECT q.name, COALESCE(r.priority, -1), r.turn, r.created, r.id
    FROM unnest(%(queues)s::text[]) AS q(name)
    LEFT JOIN {FLOOR_TABLE} AS g ON g.queue = q.name
    LEFT JOIN LATERAL (
        SELECT * FROM (
            SELECT * FROM (
                SELECT t.priority, t.turn, t.created, t.id FROM scylla_django_task AS t
                WHERE t.status = 'ready' AND t.queue = q.name AND t.priority = g.priority
                  AND (t.turn, t.created, t.id) >= (g.turn, g.created, g.id)
                ORDER BY t.priority DESC, t.turn, t.created, t.id LIMIT 1
            ) AS at_floor
            UNION ALL
            SELECT * FROM (
                SELECT t.priority, t.turn, t.created, t.id FROM scylla_django_task AS t
                WHERE t.status = 'ready' AND t.queue = q.name
                  AND t.priority < COALESCE(g.priority, %(above)s)
                ORDER BY t.priority DESC, t.turn, t.created, t.id LIMIT 1
            ) AS below
        ) AS w LIMIT 1
    ) AS r ON true
    ON CONFLICT (queue) DO UPDATE
    SET priority = excluded.priority, turn = excluded.turn, created = excluded.created,
        id = excluded.id, raised = clock_timestamp()
    WHERE f.raised <= clock_timestamp() - interval '1 second'
      AND (f.priority, f.turn, f.created, f.id)
          IS DISTINCT FROM (excluded.priority, excluded.turn, excluded.created, excluded.id)
"""
