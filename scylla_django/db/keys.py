"""Keys taken by the lease: locks and limits. The holders of a key are the running tasks that
name it; the lease's own statement decides, through a trigger on the task table, whether a
task may join them.

A task names its keys in `keys` (a JSON list of text): `L:<name>` an exclusive lock,
`S:<name>` a shared lock (the same key as `L:<name>`), `C:<name>` a slot of a limit,
`O:<name>` an order key (also in `order_key`, with the task's place `order_seq`). Each key
has one row in KEY_TABLE, made when a task naming it is submitted: the row the takers of the key
lock, so that they decide one after another. LIMIT_TABLE holds each limit's size.

- **Take**, on the row's change from ready to running (only the lease makes it): a row-level
  BEFORE trigger locks the task's key rows, `FOR UPDATE SKIP LOCKED` on PostgreSQL (a key
  another transaction is taking right now is not free; a taker never waits, so the order of
  the locks does not matter), then counts, in a snapshot taken after the locks (so every
  earlier taker's commit is in it), the running tasks that hold each key: one statement for
  the locks, then per key the one query of its kind. If a key is not free the trigger returns
  NULL, which drops the row from the lease's UPDATE: the task stays ready, never leased and
  handed back. Candidates of one statement are judged one after another: a BEFORE trigger
  sees the rows the same statement changed before. On SQLite writers are serialised and
  `RAISE(IGNORE)` drops the row the same way. A missing key row is not free.
- **Lease order**: a lease's candidates are the first `limit` ready tasks in lease order
  (priority desc, turn, created, id) whose keys look free on its snapshot (`BUSY`). Absent other
  lessees, the keyed candidates it admits are the earliest that fit: a candidate is passed
  over only if the candidates ahead of it that name one of its keys fill that key's room (an
  exclusive lock or an order key: any candidate ahead; a shared lock: an exclusive candidate
  first in line for the lock; a limit or a rate: as many as it has room for on the
  snapshot), so a later candidate never takes the room of an earlier one. On PostgreSQL the
  trigger meets the rows in the UPDATE's order, which is their tuples' physical order, not
  lease order; the lease leaves the candidates crowded out this way (`crowded`) out of its
  UPDATE, and the rest fit together, in whatever order the trigger judges them. A candidate
  crowded out for one key still counts against its others there: a task that would have
  fitted then waits for the next lease. On SQLite the lease updates its keyed candidates one
  at a time in lease order, so each is judged after the ones ahead of it, exactly. A
  candidate passed over is not replaced by a later task in the same lease. With other
  lessees, rows they hold locked are skipped and keys they are taking are not free, so
  each lease keeps this order among its own candidates only.
- **Order keys**: a task of an order key runs alone, and only when no earlier task of the key
  is ready or running, nor aborted for good holding the key (`order_block`, no retry after
  it). A task's place is `order_seq`, or its id (submit order) when null; a retry keeps its
  predecessor's place. Found through the order index (ORDER_INDEX).
- **Rates**: `R:<name>` starts at most `count` tasks in any `seconds` (RATE_TABLE). The rate's
  key row keeps its last `count` starts (`starts`, seconds on the database clock), stamped by
  the trigger when it lets a task of the rate run; a task waits while `count` of them fall
  within the `seconds` before its start. A start is the task's lease time (its `updated`, its
  History row's time), not the moment the trigger runs, so that no window of the recorded
  starts holds more than `count`: on PostgreSQL a taker locks the key row, so it sees every
  start committed before it, later ones included, and counts all of those after its own start
  minus `seconds`; on SQLite writers are serialised, and the portable lease reads the clock
  in its write transaction before its UPDATE, so the trigger (which runs later, possibly much
  later on a busy database, and, under a virtual clock, reads a clock that moves within one
  statement) stamps and judges the time the lease wrote, not its own reading of the clock.
- **Holds**: `scylla_django.lock()` holds a lock for code outside tasks with a row in
  HOLD_TABLE (`take_lock`), exclusive or shared, until released or until its `until` (seconds
  on the database clock) passes; the trigger counts live holds as holders of the lock.
- **Release** is nothing to write: a task that leaves running (complete, abort, cancel, the
  monitor's reset of a yielded or expired lease) no longer counts as a holder, in the same
  commit as its transition, fenced as that transition is. A release cannot be forgotten, lost
  or done twice, and a SIGKILLed worker's keys are free once the monitor resets its lease.

The trigger carries a WHEN clause on the row (`keys` not null, ready to running), which the
database tests before calling anything: a task without keys pays one comparison per update.
The running tasks with keys are found through a partial index (RUNNING_INDEX) that holds no
task without keys. The lease's walk passes over tasks whose keys look busy on its snapshot
(`BUSY`), and the lease over candidates crowded out by those ahead of them (`crowded`,
read only when a candidate has keys): hints that keep held keys from filling the walk and
keep lease order; the trigger decides.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL

KEY_TABLE = "scylla_django_key"
LIMIT_TABLE = "scylla_django_limit"
RATE_TABLE = "scylla_django_rate"
HOLD_TABLE = "scylla_django_hold"

#: PostgreSQL: the database clock in seconds, as rate starts are stamped.
_PG_NOW = "extract(epoch FROM clock_timestamp())::float8"
#: PostgreSQL, in the take trigger: the task's start (the lease writes it as `updated`, on the
#: database clock), as its rate keys are stamped and judged: the window a rate bounds is over
#: the starts the task table and History record.
_PG_START = "extract(epoch FROM NEW.updated)::float8"
#: SQLite: the same as _PG_NOW (julianday is constant within one statement, but under the
#: virtual clock of `scylla_django.testing`, whose julianday reads the time at each call).
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
#: SQLite, in the take trigger: as _PG_START, the task's start (`updated`, which the lease read
#: from the database clock in an earlier statement, and History records), to the microsecond:
#: the whole seconds, then the fraction of the text "YYYY-MM-DD HH:MM:SS.ffffff".
_SQLITE_START = (
    "(CAST(strftime('%s', NEW.updated) AS REAL) + CAST(substr(NEW.updated, 20) AS REAL))"
)
TASK_TABLE = "scylla_django_task"
RUNNING_INDEX = "scylla_task_running_keys_idx"

#: What the start of task `{t}` costs against its rate (a weighted rate; 1 by default).
_COST = "coalesce({t}.rate_cost, 1)"

#: The key row of key element `{e}` (a shared lock uses its lock's row).
_KEY_ROW = "(CASE WHEN left({e}, 2) = 'S:' THEN 'L:' || substr({e}, 3) ELSE {e} END)"


def _held(e: str, *elements: str) -> str:
    """PostgreSQL: the running tasks (other than the one being judged) holding one of
    `elements` (SQL text expressions) of key element `e`."""
    tests = " OR ".join(f"r.keys @> jsonb_build_array({x})" for x in elements)
    return f"FROM {TASK_TABLE} AS r WHERE r.status = 'running' AND r.keys IS NOT NULL AND ({tests})"


def _pg_holds(row: str, *, exclusive_only: bool) -> str:
    """PostgreSQL: the live holds of `scylla_django.lock()` on lock row `row` (exclusive ones
    only, or all)."""
    mode = " AND h.exclusive" if exclusive_only else ""
    return (
        f"FROM {HOLD_TABLE} AS h WHERE h.key = {row}{mode} "
        f"AND (h.until IS NULL OR h.until > {_PG_NOW})"
    )


def _sqlite_holds(row: str, *, exclusive_only: bool) -> str:
    """SQLite: as `_pg_holds`."""
    mode = " AND h.exclusive" if exclusive_only else ""
    return (
        f"FROM {HOLD_TABLE} AS h WHERE h.key = {row}{mode} "
        f"AND (h.until IS NULL OR h.until > {_SQLITE_NOW})"
    )


def _conditions(e: str, task: str, now: str) -> dict[str, str]:
    """PostgreSQL: for each kind of key element, the condition under which element `e` of
    task `task` (a row alias) cannot be taken at `now` (seconds on the database clock; one
    candidate alone)."""
    name = f"substr({e}, 3)"
    return {
        "L:": f"""EXISTS (SELECT 1 {_held(e, e, f"'S:' || {name}")})
            OR EXISTS (SELECT 1 {_pg_holds(f"'L:' || {name}", exclusive_only=False)})""",
        "S:": f"""EXISTS (SELECT 1 {_held(e, f"'L:' || {name}")})
            OR EXISTS (SELECT 1 {_pg_holds(f"'L:' || {name}", exclusive_only=True)})""",
        "C:": f"""(SELECT count(*) {_held(e, e)}) >= coalesce(
            (SELECT l.max_running FROM {LIMIT_TABLE} AS l WHERE l.name = {name}), 0)""",
        "O:": f"""EXISTS (SELECT 1 FROM {TASK_TABLE} AS p
            WHERE p.order_key = {name} AND p.id <> {task}.id AND {_order_blocks("p", task)})""",
        "R:": f"""coalesce((SELECT (SELECT count(*) FROM {KEY_TABLE} AS k,
                jsonb_array_elements_text(k.starts) AS s(s)
                WHERE k.name = {e} AND s.s::float8 > {now} - r.seconds)
                + {_COST.format(t=task)} > r.count
            FROM {RATE_TABLE} AS r WHERE r.name = {name}), true)""",
    }


def _busy(e: str, task: str) -> str:
    """PostgreSQL: key element `e` of task `task` cannot be taken now (one candidate alone)."""
    cases = " ".join(
        f"WHEN '{kind}' THEN {test}" for kind, test in _conditions(e, task, _PG_NOW).items()
    )
    return f"CASE left({e}, 2) {cases} ELSE true END"


def _order_blocks(p: str, task: str) -> str:
    """Task `p` of an order key keeps task `task` of the same key from running: `p` runs, or
    comes earlier and is ready, or came earlier and aborted for good holding the key
    (`order_block`, no retry follows it). A retry keeps its predecessor's place."""
    seq = "coalesce({t}.order_seq, {t}.id)"
    earlier = f"{seq.format(t=p)} < {seq.format(t=task)}"
    return f"""({p}.status = 'running'
        OR ({p}.status = 'ready' AND {earlier})
        OR ({p}.status = 'aborted' AND {p}.order_block AND {earlier}
            AND NOT EXISTS (SELECT 1 FROM {TASK_TABLE} AS n WHERE n.retry_of = {p}.rn)))"""


#: PostgreSQL, in the lease's walk of task `t`: some key of the task looks busy on the
#: statement's snapshot. Only a hint (the take trigger decides on locked key rows).
BUSY = f"EXISTS (SELECT 1 FROM jsonb_array_elements_text(t.keys) AS e(k) WHERE {_busy('e.k', 't')})"


def crowded(candidates: str) -> str:
    """PostgreSQL: a query of the tuple ids (`ctid`) of the candidates of one lease that the
    candidates ahead of them crowd out of a key (a tuple id once per key it is crowded out
    of). `candidates` names a relation of the lease's
    candidates (`ctid`, `id`, `priority`, `turn`, `created`, `keys`), each of whose keys looked free
    on the statement's snapshot (`BUSY`).

    Each key element of a candidate is ranked among the candidates naming its key row, in
    lease order (priority desc, turn, created, id). A candidate is crowded out by the rank of one
    element beyond its key's free room on the snapshot: an exclusive lock, an order key: not
    the first; a shared lock: the first candidate of its lock is an exclusive one; a limit:
    beyond `max_running` less its running holders; a rate: beyond `count` less the starts
    within its `seconds`. An element ranked first is never crowded out (its key looked free).
    A candidate crowded out for one key still counts against its others: the hint may pass
    over a task that would have fitted, never put a later one in an earlier one's place.
    """
    name = "substr(c.k, 3)"
    limit_room = f"""coalesce((SELECT l.max_running FROM {LIMIT_TABLE} AS l
        WHERE l.name = {name}), 0) - (SELECT count(*) {_held("c.k", "c.k")})"""
    rate_room = f"""coalesce((SELECT g.count - (SELECT count(*) FROM {KEY_TABLE} AS k,
            jsonb_array_elements_text(k.starts) AS s(s)
            WHERE k.name = c.k AND s.s::float8 > {_PG_NOW} - g.seconds)
        FROM {RATE_TABLE} AS g WHERE g.name = {name}), 0)"""
    return f"""SELECT c.ctid FROM (
        SELECT p.ctid, e.k, row_number() OVER w AS rank, first_value(left(e.k, 2)) OVER w AS head
        FROM {candidates} AS p
        CROSS JOIN LATERAL (SELECT DISTINCT x.k FROM jsonb_array_elements_text(p.keys) AS x(k)) AS e
        WHERE p.keys IS NOT NULL
        WINDOW w AS (PARTITION BY {_KEY_ROW.format(e="e.k")}
                     ORDER BY p.priority DESC, p.turn ASC, p.created ASC, p.id ASC)
    ) AS c
    WHERE c.rank > 1 AND CASE left(c.k, 2)
        WHEN 'L:' THEN true
        WHEN 'O:' THEN true
        WHEN 'S:' THEN c.head = 'L:'
        WHEN 'C:' THEN c.rank > {limit_room}
        WHEN 'R:' THEN c.rank > {rate_room}
        ELSE false END"""


#: The take trigger's judgement of one element by its kind: only that kind's query runs.
_TAKE_CASES = "\n        ".join(
    f"WHEN '{kind}' THEN busy := {test};"
    for kind, test in _conditions("element", "NEW", _PG_START).items()
)

_POSTGRESQL_INSTALL = [
    f"""CREATE INDEX {RUNNING_INDEX} ON {TASK_TABLE} USING gin (keys jsonb_path_ops)
    WHERE status = 'running' AND keys IS NOT NULL""",
    f"""CREATE FUNCTION scylla_take_keys() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    taken boolean;
    rated boolean;
    elements text[];
    element text;
    busy boolean;
BEGIN
    -- Every key row locked before any holder is counted: the counts are then read after
    -- every earlier taker of the keys committed. A row another transaction holds right now
    -- is skipped: that key is not free for this lease.
    SELECT bool_and(s.name IS NOT NULL), bool_or(left(e.k, 2) = 'R:'), array_agg(e.k)
    INTO taken, rated, elements
    FROM jsonb_array_elements_text(NEW.keys) AS e(k)
    LEFT JOIN LATERAL (
        SELECT k.name FROM {KEY_TABLE} AS k
        WHERE k.name = {_KEY_ROW.format(e="e.k")}
        FOR UPDATE SKIP LOCKED
    ) AS s ON true;
    IF NOT coalesce(taken, true) THEN
        RETURN NULL;
    END IF;
    -- Each element judged by its own kind's query, in a snapshot taken after the locks.
    FOREACH element IN ARRAY coalesce(elements, '{{}}') LOOP
        CASE left(element, 2)
        {_TAKE_CASES}
        ELSE busy := true;
        END CASE;
        IF busy THEN
            RETURN NULL;
        END IF;
    END LOOP;
    IF coalesce(rated, false) THEN
        -- Every key is free: stamp the start on each rate key (its last `count` starts), once
        -- per unit of its cost.
        UPDATE {KEY_TABLE} AS k
        SET starts = (SELECT coalesce(jsonb_agg(x.s), '[]'::jsonb) FROM (
            SELECT a.s FROM (
                SELECT s.s::float8 AS s FROM jsonb_array_elements_text(k.starts) AS s(s)
                UNION ALL SELECT {_PG_START}
                FROM generate_series(1, {_COST.format(t="NEW")})) AS a
            ORDER BY a.s DESC
            LIMIT (SELECT r.count FROM {RATE_TABLE} AS r WHERE 'R:' || r.name = k.name)) AS x)
        WHERE k.name = ANY(elements) AND left(k.name, 2) = 'R:';
    END IF;
    RETURN NEW;
END $$""",
    f"""CREATE TRIGGER scylla_take_keys BEFORE UPDATE OF status ON {TASK_TABLE}
    FOR EACH ROW WHEN (OLD.keys IS NOT NULL AND OLD.status = 'ready'
                       AND NEW.status = 'running')
    EXECUTE FUNCTION scylla_take_keys()""",
]

_POSTGRESQL_REMOVE = [
    f"DROP TRIGGER IF EXISTS scylla_take_keys ON {TASK_TABLE}",
    "DROP FUNCTION IF EXISTS scylla_take_keys()",
    f"DROP INDEX IF EXISTS {RUNNING_INDEX}",
]


def _sqlite_held(*elements: str) -> str:
    """SQLite: the running tasks (other than the one being judged) holding one of
    `elements`."""
    tests = " OR ".join(f"h.value = {x}" for x in elements)
    return (
        f"FROM {TASK_TABLE} AS r, json_each(r.keys) AS h "
        f"WHERE r.status = 'running' AND r.keys IS NOT NULL AND ({tests})"
    )


def _sqlite_busy(e: str, task: str, now: str) -> str:
    """SQLite: key element `e` of task `task` (a row alias, or the table's name) cannot be
    taken at `now` (seconds on the database clock; one candidate alone)."""
    return f"""CASE substr({e}, 1, 2)
            WHEN 'L:' THEN EXISTS (
                SELECT 1 {_sqlite_held(e, f"'S:' || substr({e}, 3)")})
                OR EXISTS (SELECT 1 {_sqlite_holds(e, exclusive_only=False)})
            WHEN 'S:' THEN EXISTS (SELECT 1 {_sqlite_held(f"'L:' || substr({e}, 3)")})
                OR EXISTS (SELECT 1 {_sqlite_holds(f"'L:' || substr({e}, 3)", exclusive_only=True)})
            WHEN 'C:' THEN (SELECT count(*) {_sqlite_held(e)}) >= coalesce(
                (SELECT l.max_running FROM {LIMIT_TABLE} AS l
                 WHERE l.name = substr({e}, 3)), 0)
            WHEN 'O:' THEN EXISTS (SELECT 1 FROM {TASK_TABLE} AS p
                WHERE p.order_key = substr({e}, 3) AND p.id <> {task}.id
                  AND {_order_blocks("p", task)})
            WHEN 'R:' THEN coalesce((SELECT (SELECT count(*) FROM {KEY_TABLE} AS k,
                    json_each(k.starts) AS s
                    WHERE k.name = {e} AND s.value > {now} - r.seconds)
                    + {_COST.format(t=task)} > r.count
                FROM {RATE_TABLE} AS r WHERE r.name = substr({e}, 3)), 1)
            ELSE 1 END"""


#: SQLite, in the take trigger: a JSON array of as many elements as the task's start costs
#: (`[0,0,0]` for 3), for one stamp per unit.
_SQLITE_UNITS = (
    "'[' || rtrim(replace(printf('%.*c', " + _COST.format(t="NEW") + ", 'x'), 'x', '0,'), ',')"
    " || ']'"
)

_SQLITE_INSTALL = [
    f"""CREATE INDEX {RUNNING_INDEX} ON {TASK_TABLE} (id)
    WHERE status = 'running' AND keys IS NOT NULL""",
    f"""CREATE TRIGGER scylla_take_keys BEFORE UPDATE OF status ON {TASK_TABLE}
    WHEN OLD.keys IS NOT NULL AND OLD.status = 'ready' AND NEW.status = 'running'
BEGIN
    SELECT RAISE(IGNORE) WHERE EXISTS (
        SELECT 1 FROM json_each(NEW.keys) AS e
        WHERE {_sqlite_busy("e.value", "NEW", _SQLITE_START)});
    -- Every key is free: stamp the start on each rate key (its last `count` starts), once per
    -- unit of its cost.
    UPDATE {KEY_TABLE}
    SET starts = (SELECT json_group_array(a.s) FROM (
        SELECT x.s, row_number() OVER (ORDER BY x.s DESC) AS n FROM (
            SELECT s.value AS s FROM json_each({KEY_TABLE}.starts) AS s
            UNION ALL SELECT {_SQLITE_START} FROM json_each({_SQLITE_UNITS})) AS x
        ORDER BY x.s DESC) AS a
        WHERE a.n <= (SELECT r.count FROM {RATE_TABLE} AS r
                      WHERE 'R:' || r.name = {KEY_TABLE}.name))
    WHERE name IN (SELECT value FROM json_each(NEW.keys) WHERE substr(value, 1, 2) = 'R:');
END""",
]

#: SQLite, in the lease's walk of the task table: a task whose keys all look free. Only a hint
#: that keeps tasks with busy keys from filling the walk (the take trigger decides).
SQLITE_FREE = f"""({TASK_TABLE}.keys IS NULL OR NOT EXISTS (
    SELECT 1 FROM json_each({TASK_TABLE}.keys) AS e
    WHERE {_sqlite_busy("e.value", TASK_TABLE, _SQLITE_NOW)}))"""


_SQLITE_REMOVE = [
    "DROP TRIGGER IF EXISTS scylla_take_keys",
    f"DROP INDEX IF EXISTS {RUNNING_INDEX}",
]


def take_lock(
    connection: BaseDatabaseWrapper, row: str, exclusive: bool, ttl: float | None
) -> int | None:
    """Hold lock row `row` ("L:<name>") for code outside tasks: its hold's id (the token to
    release it with), or None if a running task or a live hold keeps it. `ttl` seconds on the
    database clock (None: held until released). Runs in the caller's transaction, which must
    be atomic: the key row is locked first (waiting for a taker of the key to commit), then the
    holders are read in a new snapshot, as the take trigger reads them."""
    postgresql = connection.vendor == "postgresql"
    now, cast = (_PG_NOW, "::float8") if postgresql else (_SQLITE_NOW, "")
    kinds = ["'S:' || substr(%(row)s, 3)", "%(row)s"] if exclusive else ["%(row)s"]
    held_by_task = _held("", *kinds) if postgresql else _sqlite_held(*kinds)
    holds = (_pg_holds if postgresql else _sqlite_holds)("%(row)s", exclusive_only=not exclusive)
    with connection.cursor() as cursor:
        if postgresql:
            cursor.execute(
                f"SELECT 1 FROM {KEY_TABLE} WHERE name = %(row)s FOR UPDATE", {"row": row}
            )
        cursor.execute(
            f"""INSERT INTO {HOLD_TABLE} (key, exclusive, until)
            SELECT %(row)s, %(exclusive)s,
                   CASE WHEN %(ttl)s{cast} IS NULL THEN NULL ELSE {now} + %(ttl)s{cast} END
            WHERE NOT EXISTS (SELECT 1 {held_by_task}) AND NOT EXISTS (SELECT 1 {holds})
            RETURNING id""",
            {"row": row, "exclusive": exclusive, "ttl": ttl},
        )
        found = cursor.fetchone()
    return None if found is None else int(found[0])


def consume_rate(
    connection: BaseDatabaseWrapper, name: str, cost: int
) -> tuple[float | None, float]:
    """Spend `cost` starts of rate `name` now, for code outside tasks, on the key row the
    take trigger stamps (`R:<name>`, which must exist): one conditional UPDATE of the row,
    which waits for a taker of the key that holds it to commit, then counts the starts within
    the rate's period on the row's newest version (every start committed before, by tasks and
    by other callers). Returns `(stamp, 0)` once stamped (`stamp` the start, in seconds on the
    database clock), else `(None, seconds)`: the seconds until enough of the window's starts
    have aged out of it (an estimate: a later start may take the room)."""
    row = "R:" + name
    postgresql = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        if postgresql:
            cursor.execute(
                f"""UPDATE {KEY_TABLE} AS k
                SET starts = (SELECT coalesce(jsonb_agg(a.s), '[]'::jsonb) FROM (
                    SELECT a.s FROM (
                        SELECT s.s::float8 AS s FROM jsonb_array_elements_text(k.starts) AS s(s)
                        UNION ALL SELECT c.now FROM generate_series(1, %(cost)s)) AS a
                    ORDER BY a.s DESC LIMIT r.count) AS a)
                FROM {RATE_TABLE} AS r, (SELECT {_PG_NOW} AS now) AS c
                WHERE k.name = %(row)s AND r.name = %(name)s
                  AND (SELECT count(*) FROM jsonb_array_elements_text(k.starts) AS s(s)
                       WHERE s.s::float8 > c.now - r.seconds) + %(cost)s <= r.count
                RETURNING c.now""",
                {"row": row, "name": name, "cost": cost},
            )
            if (stamped := cursor.fetchone()) is not None:
                return float(stamped[0]), 0.0
            starts, now = "jsonb_array_elements_text(k.starts) AS s(s)", _PG_NOW
            value = "s.s::float8"
        else:
            units = "'[' || rtrim(replace(printf('%%.*c', %(cost)s, 'x'), 'x', '0,'), ',') || ']'"
            # Writers are serialised: the clock read now is the stamp's.
            cursor.execute(f"SELECT {_SQLITE_NOW}")
            clock = float(cursor.fetchone()[0])
            cursor.execute(
                f"""UPDATE {KEY_TABLE}
                SET starts = (SELECT json_group_array(a.s) FROM (
                    SELECT x.s FROM (
                        SELECT s.value AS s FROM json_each({KEY_TABLE}.starts) AS s
                        UNION ALL SELECT %(clock)s FROM json_each({units})) AS x
                    ORDER BY x.s DESC
                    LIMIT (SELECT r.count FROM {RATE_TABLE} AS r WHERE r.name = %(name)s)) AS a)
                WHERE name = %(row)s
                  AND (SELECT count(*) FROM json_each({KEY_TABLE}.starts) AS s,
                                            {RATE_TABLE} AS r
                       WHERE r.name = %(name)s AND s.value > %(clock)s - r.seconds)
                      + %(cost)s
                    <= (SELECT r.count FROM {RATE_TABLE} AS r WHERE r.name = %(name)s)
                RETURNING 1""",
                {"row": row, "name": name, "cost": cost, "clock": clock},
            )
            if cursor.fetchone() is not None:
                return clock, 0.0
            starts, now = "json_each(k.starts) AS s", _SQLITE_NOW
            value = "s.value"
        # The starts in the window now, newest first, and the rate: room comes when the
        # (used + cost - count)th oldest of them ages out of the window.
        cursor.execute(
            f"""SELECT r.count, r.seconds, {now}, (
                SELECT {value} FROM {KEY_TABLE} AS k, {starts}
                WHERE k.name = %(row)s AND {value} > {now} - r.seconds
                ORDER BY {value} DESC LIMIT 1 OFFSET %(offset)s)
            FROM {RATE_TABLE} AS r WHERE r.name = %(name)s""",
            {"row": row, "name": name, "offset": max(0, _rate_count(cursor, name) - cost)},
        )
        found = cursor.fetchone()
    if found is None or found[3] is None:
        return None, 0.0
    _, seconds, now_then, start = found
    return None, max(0.0, float(start) + float(seconds) - float(now_then))


def _rate_count(cursor: Any, name: str) -> int:
    """The count of rate `name` (0 if it has no row)."""
    cursor.execute(f"SELECT count FROM {RATE_TABLE} WHERE name = %(name)s", {"name": name})
    found = cursor.fetchone()
    return 0 if found is None else int(found[0])


def install_key_triggers(apps: Any, schema_editor: Any) -> None:
    """Migration step: create the take trigger and the running-keys index on the task table
    (PostgreSQL, SQLite). Other databases get none: a task with keys is refused there."""
    statements = {"postgresql": _POSTGRESQL_INSTALL, "sqlite": _SQLITE_INSTALL}
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        columns = connection.introspection.get_table_description(cursor, TASK_TABLE)
    # A migration older than the task's rate cost installs the trigger of its schema: every
    # start costs 1 (SQLite checks a trigger's columns when it is made).
    weighted = any(column.name == "rate_cost" for column in columns)
    for statement in statements.get(connection.vendor, []):
        if not weighted:
            statement = statement.replace(_COST.format(t="NEW"), "1")
        schema_editor.execute(statement, params=None)


def restore_key_triggers(apps: Any, schema_editor: Any) -> None:
    """Migration step after one that rebuilt the task table: on SQLite, adding a column with a
    default copies the table into a new one, which drops its triggers and the indexes no model
    names; install them again (a no-op elsewhere)."""
    if schema_editor.connection.vendor == "sqlite":
        remove_key_triggers(apps, schema_editor)
        install_key_triggers(apps, schema_editor)


def remove_key_triggers(apps: Any, schema_editor: Any) -> None:
    """Migration step back: drop the trigger, PostgreSQL's function and the index."""
    statements = {"postgresql": _POSTGRESQL_REMOVE, "sqlite": _SQLITE_REMOVE}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


def free_in_walk(connection: BaseDatabaseWrapper) -> Q:
    """The filter of a lease's walk (the portable lease, SQLite) that passes over tasks whose
    keys look busy, so that they do not fill the walk ahead of tasks that may run."""
    if connection.vendor != "sqlite":
        return Q()
    return Q(RawSQL(SQLITE_FREE, [], output_field=BooleanField()))


def takes_keys(connection: BaseDatabaseWrapper) -> bool:
    """Whether the database of `connection` has the trigger that takes keys with a lease."""
    return connection.vendor in {"postgresql", "sqlite"}
