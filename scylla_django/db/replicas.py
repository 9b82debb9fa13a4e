"""How far a streaming replica is behind its primary (PostgreSQL's recovery functions)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import connections

from .vendors import is_postgresql


@dataclass(frozen=True)
class ReplicaLag:
    """A replica's lag, as it sees it.

    - `replayed_ago`: time since the last transaction it replayed was committed on the primary
      (None before it replayed any); it also grows while the primary writes nothing.
    - `unreplayed_bytes`: WAL received from the primary but not yet applied.
    - `paused`: replay is paused (`pg_wal_replay_pause()`).
    """

    replayed_ago: timedelta | None
    unreplayed_bytes: int
    paused: bool


def replica_lag(using: str) -> ReplicaLag | None:
    """The lag of database `using` if it is a PostgreSQL server in recovery (a streaming
    replica), else None (a primary, or another vendor)."""
    connection = connections[using]
    if not is_postgresql(connection):
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_is_in_recovery(), clock_timestamp() - pg_last_xact_replay_timestamp(),"
            " COALESCE(pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()),"
            " 0)::bigint,"
            " CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END"
        )
        in_recovery, replayed_ago, unreplayed, paused = cursor.fetchone()
    if not in_recovery:
        return None
    return ReplicaLag(replayed_ago, max(int(unreplayed), 0), bool(paused))
