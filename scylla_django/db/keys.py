"""Keys taken by the lease: locks and limits, held in key rows and written by the task
table's own triggers, in the statement that makes the transition.

A task names its keys in `keys` (a JSON list of text): `L:<name>` an exclusive lock,
`S:<name>` a shared lock (the same key row as `L:<name>`), `C:<name>` a slot of a limit.
Each key has one row in KEY_TABLE: `holders`, the ids of the running tasks that hold it (a
JSON list), and `xmode`, whether a lock is held exclusively. LIMIT_TABLE names each limit's
most running tasks.

- **Take**, on the row's change from ready to running (only the lease makes it): a row-level
  BEFORE trigger locks the task's key rows in name order, `FOR UPDATE SKIP LOCKED` on
  PostgreSQL (a row another transaction holds right now is not free), judges them on their
  latest committed version, and either writes the task's id into them or returns NULL, which
  drops the row from the lease's UPDATE: the task stays ready, never leased and handed back.
  Candidates of one statement are judged one after another, each seeing what the earlier ones
  took. On SQLite writers are serialised and `RAISE(IGNORE)` drops the row the same way.
- **Release**, on every change out of running (complete, abort, cancel, yield, the monitor's
  reset): a row-level AFTER trigger removes the task's id from its key rows (locked in name
  order). It fires only for rows the transition's fenced write changed, so a refused
  transition frees nothing, and a second release of the same task removes nothing.

Both triggers carry a WHEN clause on the row (`keys` not null, the status change), which the
database tests before calling anything: a task without keys pays one comparison per update,
and no statement's plan changes. The lease's walk skips tasks whose keys are busy on its
snapshot (`BUSY`), a hint that keeps a held key from filling the walk; the trigger decides.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

KEY_TABLE = "scylla_django_key"
LIMIT_TABLE = "scylla_django_limit"
TASK_TABLE = "scylla_django_task"

#: The key row of key element `{e}` (a shared lock uses its lock's row).
_KEY_ROW = "(CASE WHEN left({e}, 2) = 'S:' THEN 'L:' || substr({e}, 3) ELSE {e} END)"
_SQLITE_KEY_ROW = "(CASE WHEN substr({e}, 1, 2) = 'S:' THEN 'L:' || substr({e}, 3) ELSE {e} END)"


def _busy(k: str, e: str) -> str:
    """PostgreSQL: key row `k` cannot be taken now for key element `e` (holders are live)."""
    n = f"jsonb_array_length({k}.holders)"
    return f"""CASE left({e}, 2)
        WHEN 'L:' THEN {n} > 0
        WHEN 'S:' THEN {k}.xmode AND {n} > 0
        WHEN 'C:' THEN {n} >= coalesce((SELECT l.max_running FROM {LIMIT_TABLE} AS l
                                        WHERE l.name = substr({e}, 3)), 0)
        ELSE true END"""


#: PostgreSQL, in the lease's walk of task `t`: some key of the task looks busy on the
#: statement's snapshot. Only a hint (the take trigger decides on locked rows).
BUSY = f"""EXISTS (SELECT 1 FROM jsonb_array_elements_text(t.keys) AS e(k)
    JOIN {KEY_TABLE} AS s ON s.name = {_KEY_ROW.format(e="e.k")}
    WHERE {_busy("s", "e.k")})"""

_POSTGRESQL_INSTALL = [
    f"""CREATE FUNCTION scylla_take_keys() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    key record;
    busy boolean;
BEGIN
    -- Key rows are made on first use; an existing row is neither locked nor waited for.
    INSERT INTO {KEY_TABLE} (name, holders, xmode)
    SELECT DISTINCT {_KEY_ROW.format(e="e.k")}, '[]'::jsonb, false
    FROM jsonb_array_elements_text(NEW.keys) AS e(k)
    ORDER BY 1
    ON CONFLICT (name) DO NOTHING;
    FOR key IN
        SELECT e.k, s.name, s.holders, s.xmode FROM jsonb_array_elements_text(NEW.keys) AS e(k)
        LEFT JOIN LATERAL (
            SELECT k.name, k.holders, k.xmode FROM {KEY_TABLE} AS k
            WHERE k.name = {_KEY_ROW.format(e="e.k")}
            FOR UPDATE SKIP LOCKED
        ) AS s ON true
        ORDER BY {_KEY_ROW.format(e="e.k")}
    LOOP
        -- Not locked by us (another transaction holds it now), or not free: not leased.
        busy := key.name IS NULL OR {_busy("key", "key.k")};
        IF busy THEN
            RETURN NULL;
        END IF;
    END LOOP;
    UPDATE {KEY_TABLE} AS k
    SET holders = k.holders || to_jsonb(NEW.id),
        xmode = left(e.k, 2) = 'L:'
    FROM jsonb_array_elements_text(NEW.keys) AS e(k)
    WHERE k.name = {_KEY_ROW.format(e="e.k")};
    RETURN NEW;
END $$""",
    f"""CREATE FUNCTION scylla_release_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM {KEY_TABLE} AS k
    WHERE k.name = ANY(ARRAY(SELECT {_KEY_ROW.format(e="e.k")}
                             FROM jsonb_array_elements_text(OLD.keys) AS e(k)))
    ORDER BY k.name FOR UPDATE;
    UPDATE {KEY_TABLE} AS k
    SET holders = coalesce((SELECT jsonb_agg(h.h) FROM jsonb_array_elements(k.holders) AS h(h)
                            WHERE h.h <> to_jsonb(OLD.id)), '[]'::jsonb),
        xmode = k.xmode AND EXISTS (SELECT 1 FROM jsonb_array_elements(k.holders) AS h(h)
                                    WHERE h.h <> to_jsonb(OLD.id))
    WHERE k.name = ANY(ARRAY(SELECT {_KEY_ROW.format(e="e.k")}
                             FROM jsonb_array_elements_text(OLD.keys) AS e(k)))
      AND k.holders @> to_jsonb(OLD.id);
    RETURN NULL;
END $$""",
    f"""CREATE TRIGGER scylla_take_keys BEFORE UPDATE OF status ON {TASK_TABLE}
    FOR EACH ROW WHEN (OLD.keys IS NOT NULL AND OLD.status = 'ready'
                       AND NEW.status = 'running')
    EXECUTE FUNCTION scylla_take_keys()""",
    f"""CREATE TRIGGER scylla_release_keys AFTER UPDATE OF status ON {TASK_TABLE}
    FOR EACH ROW WHEN (OLD.keys IS NOT NULL AND OLD.status = 'running'
                       AND NEW.status <> 'running')
    EXECUTE FUNCTION scylla_release_keys()""",
]

_POSTGRESQL_REMOVE = [
    f"DROP TRIGGER IF EXISTS scylla_take_keys ON {TASK_TABLE}",
    f"DROP TRIGGER IF EXISTS scylla_release_keys ON {TASK_TABLE}",
    "DROP FUNCTION IF EXISTS scylla_take_keys()",
    "DROP FUNCTION IF EXISTS scylla_release_keys()",
]

_SQLITE_ROW = _SQLITE_KEY_ROW.format(e="e.value")
_SQLITE_INSTALL = [
    f"""CREATE TRIGGER scylla_take_keys BEFORE UPDATE OF status ON {TASK_TABLE}
    WHEN OLD.keys IS NOT NULL AND OLD.status = 'ready' AND NEW.status = 'running'
BEGIN
    INSERT OR IGNORE INTO {KEY_TABLE} (name, holders, xmode)
    SELECT DISTINCT {_SQLITE_ROW}, '[]', 0 FROM json_each(NEW.keys) AS e;
    SELECT RAISE(IGNORE) WHERE EXISTS (
        SELECT 1 FROM json_each(NEW.keys) AS e JOIN {KEY_TABLE} AS k ON k.name = {_SQLITE_ROW}
        WHERE CASE substr(e.value, 1, 2)
            WHEN 'L:' THEN json_array_length(k.holders) > 0
            WHEN 'S:' THEN k.xmode AND json_array_length(k.holders) > 0
            WHEN 'C:' THEN json_array_length(k.holders) >= coalesce(
                (SELECT l.max_running FROM {LIMIT_TABLE} AS l
                 WHERE l.name = substr(e.value, 3)), 0)
            ELSE 1 END);
    UPDATE {KEY_TABLE}
    SET holders = json_insert(holders, '$[#]', NEW.id),
        xmode = (SELECT substr(e.value, 1, 2) = 'L:' FROM json_each(NEW.keys) AS e
                 WHERE {_SQLITE_ROW} = {KEY_TABLE}.name LIMIT 1)
    WHERE name IN (SELECT {_SQLITE_ROW} FROM json_each(NEW.keys) AS e);
END""",
    f"""CREATE TRIGGER scylla_release_keys AFTER UPDATE OF status ON {TASK_TABLE}
    WHEN OLD.keys IS NOT NULL AND OLD.status = 'running' AND NEW.status <> 'running'
BEGIN
    UPDATE {KEY_TABLE}
    SET holders = (SELECT json_group_array(h.value) FROM json_each({KEY_TABLE}.holders) AS h
                   WHERE h.value <> OLD.id),
        xmode = xmode AND EXISTS (SELECT 1 FROM json_each({KEY_TABLE}.holders) AS h
                                  WHERE h.value <> OLD.id)
    WHERE name IN (SELECT {_SQLITE_ROW} FROM json_each(OLD.keys) AS e)
      AND EXISTS (SELECT 1 FROM json_each({KEY_TABLE}.holders) AS h WHERE h.value = OLD.id);
END""",
]

_SQLITE_REMOVE = [
    "DROP TRIGGER IF EXISTS scylla_take_keys",
    "DROP TRIGGER IF EXISTS scylla_release_keys",
]


def install_key_triggers(apps: Any, schema_editor: Any) -> None:
    """Migration step: create the take and release triggers on the task table (PostgreSQL,
    SQLite). Other databases get none: a task with keys is refused there at submit."""
    statements = {"postgresql": _POSTGRESQL_INSTALL, "sqlite": _SQLITE_INSTALL}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


def remove_key_triggers(apps: Any, schema_editor: Any) -> None:
    """Migration step back: drop the triggers (and PostgreSQL's functions)."""
    statements = {"postgresql": _POSTGRESQL_REMOVE, "sqlite": _SQLITE_REMOVE}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


def takes_keys(connection: BaseDatabaseWrapper) -> bool:
    """Whether the database of `connection` has the triggers that take and release keys."""
    return connection.vendor in {"postgresql", "sqlite"}
