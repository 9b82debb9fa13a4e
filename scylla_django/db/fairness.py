"""Fair shares: the turn a new task takes within its priority, so that a queue shares its
capacity across the values of a key (`fair_key`, a tenant) instead of serving the oldest first.

The lease takes a queue's ready tasks in (priority desc, `turn`, created, id) order, walking the
ready index, which holds `turn`: fairness adds nothing to the lease but that column. A task
outside any share keeps turn 0 and its place by age. A task with a fair key is given its turn
by a trigger when it is inserted (every way a task is made: a submission, a bulk one, a retry,
a child, a follow-up), on the database, in the inserting statement:

    turn = max(last ready turn of its key at its priority + 1 / weight,
               first due ready turn of its priority)

where the first due ready turn of its priority (`first`) is where the queue's service is now,
and the key's weight is its queue's (`QueueSetting.fair_weights`, 1 by default); a key without
ready tasks starts at `first`. So each key's ready tasks are spaced `1 / weight` apart, starting
no earlier than `first`: a key that submits 20,000 tasks takes the turns ahead of it one by
one, and another key's first task arriving later takes the turn `first`, right after the task
at the head (ties go by age). Among the tasks leased after it was inserted, the `k`th ready
task of a key (turn `first + (k - 1) / weight`) is preceded by at most `k * w / weight` tasks of
each other key of weight `w` (their turns from `first` on are spaced by `1 / w`), plus those
the lessees already held: fairness is weighted round robin, decided at submit.

The look-ups are two probes of indexes (the ready index for `first`, `FAIR_INDEX` for the
key's last ready turn) and one of the queue's setting row; each row of a bulk insert sees the
rows inserted before it (PostgreSQL: a VOLATILE BEFORE trigger; SQLite: an AFTER trigger,
whose row is written before the next is inserted). Two transactions inserting tasks of the
same key at once may give both the same turns: ties go by age, so the key is served at most
as often as it would be with the two submissions in one (a tie costs fairness, not safety).

MySQL/MariaDB get no trigger: a task with a fair key is refused there (`takes_turns`).
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

TASK_TABLE = "scylla_django_task"
SETTING_TABLE = "scylla_django_queuesetting"
FAIR_INDEX = "scylla_task_fair_idx"

_POSTGRESQL_INSTALL = [
    # Seq scans and sorts off: the function's plans are cached for the session, and planned on
    # a small or unanalysed table (the first inserts into an empty one) they would read a
    # queue's ready tasks and sort them at every row, quadratic in a bulk insert: each look-up
    # stays one probe of its index in its order (the ready index, `FAIR_INDEX` backwards),
    # whatever the planner knows of the table.
    f"""CREATE FUNCTION scylla_fair_turn() RETURNS trigger LANGUAGE plpgsql VOLATILE
    SET enable_seqscan = off SET enable_sort = off AS $$
DECLARE
    first float8;
    last float8;
    weight float8;
BEGIN
    -- Where the service of the task's priority is now: its first due ready turn.
    SELECT t.turn INTO first FROM {TASK_TABLE} AS t
    WHERE t.status = 'ready' AND t.queue = NEW.queue AND t.priority = NEW.priority
      AND (t.not_before IS NULL OR t.not_before <= statement_timestamp())
    ORDER BY t.priority DESC, t.turn, t.created, t.id LIMIT 1;
    -- Where its key's ready tasks end.
    SELECT t.turn INTO last FROM {TASK_TABLE} AS t
    WHERE t.status = 'ready' AND t.queue = NEW.queue AND t.fair_key = NEW.fair_key
      AND t.priority = NEW.priority
    ORDER BY t.turn DESC LIMIT 1;
    SELECT (s.fair_weights ->> NEW.fair_key)::float8 INTO weight FROM {SETTING_TABLE} AS s
    WHERE s.queue = NEW.queue;
    NEW.turn := GREATEST(coalesce(last + 1.0 / coalesce(weight, 1), first, 0), coalesce(first, 0));
    RETURN NEW;
END $$""",
    f"""CREATE TRIGGER scylla_fair_turn BEFORE INSERT ON {TASK_TABLE}
    FOR EACH ROW WHEN (NEW.fair_key IS NOT NULL) EXECUTE FUNCTION scylla_fair_turn()""",
]

_POSTGRESQL_REMOVE = [
    f"DROP TRIGGER IF EXISTS scylla_fair_turn ON {TASK_TABLE}",
    "DROP FUNCTION IF EXISTS scylla_fair_turn()",
]

#: SQLite: the database clock as the task table writes it (text, to the microsecond).
_SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f000', 'now')"

_SQLITE_INSTALL = [
    f"""CREATE TRIGGER scylla_fair_turn AFTER INSERT ON {TASK_TABLE}
    WHEN NEW.fair_key IS NOT NULL
BEGIN
    UPDATE {TASK_TABLE} SET turn = (
        SELECT max(coalesce(l.last + 1.0 / coalesce(w.weight, 1), f.first, 0),
                   coalesce(f.first, 0))
        FROM (SELECT (SELECT t.turn FROM {TASK_TABLE} AS t
                      WHERE t.status = 'ready' AND t.queue = NEW.queue
                        AND t.priority = NEW.priority AND t.id <> NEW.id
                        AND (t.not_before IS NULL OR t.not_before <= {_SQLITE_NOW})
                      ORDER BY t.priority DESC, t.turn, t.created, t.id LIMIT 1) AS first) AS f,
             (SELECT (SELECT t.turn FROM {TASK_TABLE} AS t
                      WHERE t.status = 'ready' AND t.queue = NEW.queue
                        AND t.fair_key = NEW.fair_key AND t.priority = NEW.priority
                        AND t.id <> NEW.id
                      ORDER BY t.turn DESC LIMIT 1) AS last) AS l,
             (SELECT (SELECT CAST(j.value AS REAL)
                      FROM {SETTING_TABLE} AS s, json_each(s.fair_weights) AS j
                      WHERE s.queue = NEW.queue AND j.key = NEW.fair_key) AS weight) AS w)
    WHERE id = NEW.id;
END""",
]

_SQLITE_REMOVE = ["DROP TRIGGER IF EXISTS scylla_fair_turn"]


def install_fair_triggers(apps: Any, schema_editor: Any) -> None:
    """Migration step: create the trigger that gives a new task with a fair key its turn
    (PostgreSQL, SQLite)."""
    statements = {"postgresql": _POSTGRESQL_INSTALL, "sqlite": _SQLITE_INSTALL}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


def remove_fair_triggers(apps: Any, schema_editor: Any) -> None:
    """Migration step back: drop the trigger (and PostgreSQL's function)."""
    statements = {"postgresql": _POSTGRESQL_REMOVE, "sqlite": _SQLITE_REMOVE}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


def restore_fair_triggers(apps: Any, schema_editor: Any) -> None:
    """Migration step after one that rebuilt the task table on SQLite (which drops its
    triggers): install the trigger again (a no-op elsewhere)."""
    if schema_editor.connection.vendor == "sqlite":
        remove_fair_triggers(apps, schema_editor)
        install_fair_triggers(apps, schema_editor)


def takes_turns(connection: BaseDatabaseWrapper) -> bool:
    """Whether the database of `connection` has the trigger that gives fair turns."""
    return connection.vendor in {"postgresql", "sqlite"}
