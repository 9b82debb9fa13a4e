"""The app's tables as VACUUM sees them (PostgreSQL): their dead rows, sizes and bloat, what holds
VACUUM back and the sessions idle in a transaction, from the catalog (`db.vacuum_report`, four
small queries on the primary, never on a read replica)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import DEFAULT_DB_ALIAS, connections

from ... import db
from ...durations import ago, short
from ...models import queue_tables

VACUUM_TABLES_SHOWN = 8
"""The tables the dashboard lists: those with the most dead rows (then by name)."""


@dataclass(frozen=True)
class TableRow:
    """A table as the dashboard shows it: its dead rows' and its bloat's shares in percent, and
    when VACUUM last ran on it."""

    table: db.TableVacuum
    dead: str
    bloat: str
    vacuumed: str


@dataclass(frozen=True)
class IdleRow:
    """A session idle in a transaction: for how long, and since its transaction began."""

    session: db.IdleSession
    idle: str
    open: str


@dataclass(frozen=True)
class Vacuum:
    """What VACUUM sees of database `database` (`report` None: not PostgreSQL, `vendor` says
    what it is instead)."""

    database: str
    vendor: str
    report: db.VacuumReport | None

    @property
    def tables(self) -> list[TableRow]:
        """The tables worth a look: those with rows, the most dead rows first."""
        if self.report is None:
            return []
        shown = [t for t in self.report.tables if t.live or t.dead][:VACUUM_TABLES_SHOWN]
        return [
            TableRow(
                t,
                f"{t.dead_ratio:.0%}",
                "" if t.bloat_ratio is None else f"{t.bloat_ratio:.0%}",
                ago(t.last_vacuum) if t.last_vacuum is not None else "",
            )
            for t in shown
        ]

    @property
    def idle(self) -> list[IdleRow]:
        """The sessions idle in a transaction, longest first."""
        if self.report is None:
            return []
        return [
            IdleRow(s, short(max(s.idle, timedelta(0))), short(max(s.age, timedelta(0))))
            for s in self.report.idle
        ]

    @property
    def late(self) -> bool:
        """The oldest holder of the horizon has held it longer than a minute."""
        oldest = self.report.oldest if self.report is not None else None
        return bool(oldest and oldest.age is not None and oldest.age > timedelta(minutes=1))

    @property
    def oldest_age(self) -> str:
        """How long the oldest holder's transaction has been open ("" if unknown)."""
        oldest = self.report.oldest if self.report is not None else None
        if oldest is None or oldest.age is None:
            return ""
        return short(max(oldest.age, timedelta(0)))


def vacuum(database: str = DEFAULT_DB_ALIAS) -> Vacuum:
    """The VACUUM report of `database` (a primary: a replica's statistics are its own)."""
    return Vacuum(
        database, connections[database].display_name, db.vacuum_report(database, queue_tables())
    )
