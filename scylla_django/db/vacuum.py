"""What keeps VACUUM from cleaning the queue tables, read from PostgreSQL's catalog.

A queue table is updated at every transition, so each lease, heartbeat and finish leaves a dead
row version behind. VACUUM (autovacuum) reclaims them only once no transaction can still see
them: a transaction that stays open, an idle-in-transaction session, a REPEATABLE READ report,
a prepared transaction or a replication slot holds the *horizon* back, and while it does the
dead rows pile up, the indexes fill with entries that point at them and every lease scan walks
past them. `vacuum_report()` reads, in four small catalog queries:

- each table's live and dead rows (`pg_stat_user_tables`), its size and its indexes' size, and
  an estimate of its bloat (the space its live rows would not need: their count times their
  average width from `pg_stats`, at the table's fillfactor);
- what holds the horizon back in this database, oldest first: sessions with a transaction id
  or a snapshot (`pg_stat_activity.backend_xid`/`backend_xmin`; walsenders too, whose standbys
  send their horizon with `hot_standby_feedback`), prepared transactions and replication slots;
- the sessions idle in a transaction, longest first.

The session that asks is never counted. Without `pg_read_all_stats` (or `pg_monitor`) the
sessions of other roles are hidden: `hidden` counts them. On the other vendors there is no
such horizon to watch (SQLite keeps no row versions; MariaDB's purge is another story), and
`vacuum_report()` returns None: not applicable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections

from .vendors import is_postgresql

HOLDERS_SHOWN = 5
"""How many of the oldest horizon holders a report names."""

IDLE_SHOWN = 10
"""How many of the longest idle-in-transaction sessions a report names."""

QUERY_SHOWN = 200
"""Characters of a session's last statement kept in a report."""

# A heap tuple's header (23 bytes, aligned to 24) and its line pointer (4), per row.
_ROW_OVERHEAD = 28


@dataclass(frozen=True)
class TableVacuum:
    """One table as VACUUM sees it: rows, dead rows, sizes (bytes) and the last vacuum.

    `bloat` is an estimate of the heap's bytes that its live rows do not need (None before the
    table has statistics: ANALYZE has not run on it yet).
    """

    table: str
    live: int
    dead: int
    size: int
    index_size: int
    bloat: int | None
    last_vacuum: datetime | None
    fillfactor: int = 100
    autovacuum: bool = True
    """Autovacuum is not turned off for this table (`autovacuum_enabled`)."""

    @property
    def dead_ratio(self) -> float:
        """Dead rows among all the rows of the table (0.0 for an empty one)."""
        rows = self.live + self.dead
        return self.dead / rows if rows else 0.0

    @property
    def bloat_ratio(self) -> float | None:
        """The estimated bloat as a share of the heap's size."""
        if self.bloat is None:
            return None
        return self.bloat / self.size if self.size else 0.0


@dataclass(frozen=True)
class HorizonHolder:
    """Something that keeps VACUUM from removing the rows it could still see.

    `kind` is `session`, `prepared transaction` or `replication slot`; `name` the session's
    `application_name`, the prepared transaction's gid or the slot's name; `transactions` how
    many transaction ids old its horizon is; `age` how long its transaction has been open (None
    for a slot); `state` the session's (`idle in transaction`, `active`, ...).
    """

    kind: str
    pid: int | None
    name: str
    state: str
    user: str
    transactions: int
    age: timedelta | None
    query: str = ""

    @property
    def label(self) -> str:
        """How a person finds it: "session 4242 (analytics, idle in transaction)"."""
        name = self.name or "no application_name"
        if self.kind == "session":
            return f"session {self.pid} ({name}, {self.state})"
        return f"{self.kind} {name!r}" + (f" ({self.state})" if self.state else "")


@dataclass(frozen=True)
class IdleSession:
    """A session idle in a transaction: for how long, since when its transaction is open, and
    whether it holds the horizon back (it has a transaction id or a snapshot)."""

    pid: int
    name: str
    user: str
    idle: timedelta
    age: timedelta
    holds_horizon: bool
    state: str
    query: str = ""


@dataclass(frozen=True)
class VacuumReport:
    """The queue tables, what holds VACUUM back (oldest first, at most `HOLDERS_SHOWN`), the
    idle-in-transaction sessions (longest first, at most `IDLE_SHOWN`, of `idle_count`), and
    the sessions hidden from this role."""

    tables: list[TableVacuum]
    holders: list[HorizonHolder]
    idle: list[IdleSession]
    idle_count: int
    hidden: int
    idle_timeout: timedelta | None
    """`idle_in_transaction_session_timeout` of this session (None: unset, 0)."""
    autovacuum: bool = True
    """The server's `autovacuum` setting: off, nothing reclaims dead rows but a manual VACUUM."""

    @property
    def unvacuumed(self) -> list[str]:
        """The tables autovacuum leaves alone: every one when it is off on the server, else
        those whose `autovacuum_enabled` is off."""
        return [t.table for t in self.tables if not (self.autovacuum and t.autovacuum)]

    @property
    def oldest(self) -> HorizonHolder | None:
        """The oldest holder of the horizon, if anything holds it."""
        return self.holders[0] if self.holders else None


def vacuum_report(using: str, tables: Sequence[str]) -> VacuumReport | None:
    """The report of database `using` on `tables` (their names), or None when the database is
    not PostgreSQL."""
    connection = connections[using]
    if not is_postgresql(connection):
        return None
    with connection.cursor() as cursor:
        # Statistics views are read once per transaction; a caller inside one (a request in
        # ATOMIC_REQUESTS, a test) would read a stale picture.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(_TABLES, [list(tables)])
        table_rows = cursor.fetchall()
        cursor.execute(_HOLDERS, [QUERY_SHOWN, HOLDERS_SHOWN])
        holder_rows = cursor.fetchall()
        cursor.execute(_IDLE, [QUERY_SHOWN, IDLE_SHOWN])
        idle_rows = cursor.fetchall()
        cursor.execute(_SESSIONS)
        idle_count, hidden, timeout_ms, autovacuum = cursor.fetchone()
    return VacuumReport(
        tables=[_table(*row) for row in table_rows],
        holders=[
            HorizonHolder(kind, pid, name or "", state or "", user or "", int(xids or 0), age, q)
            for kind, pid, name, state, user, xids, age, q in holder_rows
        ],
        idle=[
            IdleSession(pid, name or "", user or "", idle, age, bool(holds), state, query or "")
            for pid, name, user, idle, age, holds, state, query in idle_rows
        ],
        idle_count=int(idle_count),
        hidden=int(hidden),
        idle_timeout=timedelta(milliseconds=int(timeout_ms)) if int(timeout_ms) else None,
        autovacuum=bool(autovacuum),
    )


def idle_in_transaction_timeout(using: str) -> timedelta | None:
    """`idle_in_transaction_session_timeout` as database `using` gives it to a new session of
    this app (None when unset: 0); PostgreSQL only."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT setting::bigint FROM pg_settings "
            "WHERE name = 'idle_in_transaction_session_timeout'"
        )
        (milliseconds,) = cursor.fetchone()
    return timedelta(milliseconds=int(milliseconds)) if milliseconds else None


def _table(
    name: str,
    live: int,
    dead: int,
    size: int,
    index_size: int,
    last_vacuum: datetime | None,
    row_width: float | None,
    fillfactor: int,
    block_size: int,
    autovacuum: bool,
) -> TableVacuum:
    bloat = None
    if row_width is not None:
        # The pages the live rows need at the table's fillfactor; the rest of the heap is bloat.
        usable = (block_size - 24) * fillfactor / 100
        rows_per_page = max(usable // (_ROW_OVERHEAD + row_width), 1)
        needed = -(-int(live) // int(rows_per_page)) * block_size
        bloat = max(int(size) - needed, 0)
    return TableVacuum(
        table=name,
        live=int(live),
        dead=int(dead),
        size=int(size),
        index_size=int(index_size),
        bloat=bloat,
        last_vacuum=last_vacuum,
        fillfactor=int(fillfactor),
        autovacuum=bool(autovacuum),
    )


# Tables of the current schemas, with their average row width from pg_stats (NULL before
# ANALYZE) and their fillfactor (100 unless set on the table).
_TABLES = """
    SELECT s.relname, s.n_live_tup, s.n_dead_tup,
           pg_relation_size(s.relid), pg_indexes_size(s.relid),
           GREATEST(s.last_vacuum, s.last_autovacuum),
           (SELECT sum(st.avg_width) FROM pg_stats AS st
             WHERE st.schemaname = s.schemaname AND st.tablename = s.relname),
           COALESCE((SELECT split_part(option, '=', 2)::int
                       FROM unnest(c.reloptions) AS option
                      WHERE option LIKE 'fillfactor=%%'), 100),
           current_setting('block_size')::int,
           NOT EXISTS (SELECT 1 FROM unnest(c.reloptions) AS option
                        WHERE split_part(option, '=', 1) = 'autovacuum_enabled'
                          AND lower(split_part(option, '=', 2)) IN ('false', 'off', 'no', '0'))
      FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
     WHERE s.relname = ANY(%s) AND s.schemaname = ANY(current_schemas(false))
     ORDER BY s.n_dead_tup DESC, s.relname
"""

# Ages are measured on clock_timestamp(): now() is the asking transaction's start, which may
# be older than what it measures. Every snapshot taken while a transaction holds its id has
# that id for its xmin, so the sessions that began after it are as old by their transactions:
# of those, the one whose transaction began first (the one to end) comes first.
_HOLDERS = """
    SELECT * FROM (
        SELECT 'session' AS kind, pid, application_name, state, usename::text,
               GREATEST(age(backend_xid), age(backend_xmin)) AS transactions,
               clock_timestamp() - xact_start AS held, left(query, %s)
          FROM pg_stat_activity
         WHERE (datname = current_database() OR backend_type = 'walsender')
           AND pid <> pg_backend_pid()
           AND backend_type <> 'autovacuum worker'
           AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)
        UNION ALL
        SELECT 'prepared transaction', NULL, gid, 'prepared', owner::text, age(transaction),
               clock_timestamp() - prepared, ''
          FROM pg_prepared_xacts
         WHERE database = current_database()
        UNION ALL
        SELECT 'replication slot', active_pid, slot_name::text,
               CASE WHEN active THEN 'active' ELSE 'inactive' END, '', age(xmin), NULL, ''
          FROM pg_replication_slots
         WHERE xmin IS NOT NULL AND (database IS NULL OR database = current_database())
    ) AS holders
    ORDER BY transactions DESC NULLS LAST, held DESC NULLS LAST, pid
    LIMIT %s
"""

_IDLE = """
    SELECT pid, application_name, usename::text, clock_timestamp() - state_change,
           clock_timestamp() - xact_start, backend_xid IS NOT NULL OR backend_xmin IS NOT NULL,
           state, left(query, %s)
      FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid()
       AND state IN ('idle in transaction', 'idle in transaction (aborted)')
     ORDER BY xact_start, pid
     LIMIT %s
"""

# Sessions of other roles show no state without pg_read_all_stats: they are counted as hidden.
_SESSIONS = """
    SELECT count(*) FILTER (WHERE state IN ('idle in transaction',
                                            'idle in transaction (aborted)')),
           count(*) FILTER (WHERE state IS NULL AND backend_type = 'client backend'),
           (SELECT setting::bigint FROM pg_settings
             WHERE name = 'idle_in_transaction_session_timeout'),
           current_setting('autovacuum')::boolean
      FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


TASK_TABLE_STORAGE = {
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "10000",
    "autovacuum_vacuum_cost_delay": "0",
    "autovacuum_analyze_scale_factor": "0.02",
}
"""The task table's autovacuum settings (PostgreSQL storage parameters).

The table keeps finished tasks until their retention, so autovacuum's default trigger, 20 % of
the table's rows dead, lets hundreds of thousands of dead versions pile up on a big table
before the first VACUUM; every transition leaves one, and the lease walks the ready index past
their entries. Here VACUUM starts at 10,000 dead rows whatever the table's size, runs without
the cost-based pauses, so it is over quickly once the horizon moves on, and statistics follow
the ready/running share closely. No fillfactor: each transition changes an indexed column
(`status`, `deadline`), so no update is HOT and free room on the page would go unused."""


def tune_task_table(apps: Any, schema_editor: Any) -> None:
    """Migration step: set `TASK_TABLE_STORAGE` on the task table (PostgreSQL; a no-op
    elsewhere)."""
    if not is_postgresql(schema_editor.connection):
        return
    table = schema_editor.quote_name(apps.get_model("scylla_django", "Task")._meta.db_table)
    options = ", ".join(f"{name} = {value}" for name, value in TASK_TABLE_STORAGE.items())
    schema_editor.execute(f"ALTER TABLE {table} SET ({options})", params=None)


def untune_task_table(apps: Any, schema_editor: Any) -> None:
    """Migration step back: the server's defaults again."""
    if not is_postgresql(schema_editor.connection):
        return
    table = schema_editor.quote_name(apps.get_model("scylla_django", "Task")._meta.db_table)
    schema_editor.execute(f"ALTER TABLE {table} RESET ({', '.join(TASK_TABLE_STORAGE)})", None)
