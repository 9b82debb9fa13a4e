"""The database room: every SQL statement of the app and every difference between vendors.

Nothing outside this package (migrations aside) writes SQL, asks `connection.vendor` or opens
a cursor, nor asks which database it is on: it asks `driver(using)` for the database's driver
and calls its operations, or names the capability it needs (`driver(using).listens`), and
calls the names below (`from scylla_django import db`). The room stands on `enums`, `conf`
and `retries` only and never imports the models: each function receives the queryset, the
model or the `Tables` it works on.

- PostgreSQL (`PostgresqlDriver`): every transition is one statement (`postgresql`),
  submissions are one statement each, or a pipeline of them (`inserts`), the hot statements
  are prepared (`prepared`), and `pg_notify` tells listening workers which queues got
  leasable tasks (`notifications`).
- SQLite (`SqliteDriver`): the ORM's path (`orm_driver`); no row locks, so every write
  transaction of this app begins with `BEGIN IMMEDIATE` (`transactions`); timestamps are
  text, written with microseconds (`clock`).
- Anything else (MySQL/MariaDB 10.6+, `MysqlDriver`): the ORM's path, `SELECT … FOR UPDATE
  SKIP LOCKED` then a conditional UPDATE, and one savepoint per row for bulk submission.

| module | holds |
|---|---|
| `driver` | `Driver`: a database's operations and capabilities; `driver(using)` picks one |
| `postgresql_driver` | `PostgresqlDriver`: each operation a statement of `postgresql`/`inserts` |
| `orm_driver` | `OrmDriver`, `SqliteDriver`, `MysqlDriver`: the operations through the ORM |
| `portable_lease` | the ORM's lease, one write transaction |
| `portable_finish` | the ORM's finish of a worker's leases |
| `portable_heartbeat` | the ORM's heartbeat of many leases |
| `expiry` | `expiry_kind()`: how an expired lease is judged; the ORM's reset of expired leases |
| `lease_rn` | `lease_rn()`: a task leased by its rn, for a run by hand |
| `vendors` | which vendor a connection is (the only `connection.vendor` tests; this room's own) |
| `conditions` | `due()`, `unexpired()`, `NOT_YIELDED`, `capped_deadline()`: a lease's rows |
| `tallies` | `count_finished()`: the batch counters a finish moves |
| `clock` | `Now`, `Clock`, `now_plus()`, `read_clock()`: the database clock |
| `transactions` | `write_atomic()`: the transaction of a state change |
| `connections` | `discard_connection()`, `ping()` |
| `retry` | `DatabaseRetry`: a loop's retries of a failed database call; `migrate_hint()` |
| `prepared` | prepared statements and a worker's plan settings (PostgreSQL) |
| `tables` | `Tables`: the models the lease and finish statements name |
| `rows` | raw rows converted as the ORM would |
| `postgresql` | single-statement transition, lease, batched finish, heartbeat, yield, reset |
| `inserts` | submissions: single, pipelined bulk (PostgreSQL), bulk insert (SQLite) |
| `notifications` | the LISTEN/NOTIFY channels, NOTIFY, a LISTEN connection |
| `sqlite` | SQL only SQLite needs (`json_each`) |
| `portable` | one call per query, the vendor's way: JSON tests, RETURNING, upsert, row locks |
| `keys` | the triggers that take a task's locks and limit slots with its lease and free them |
| `fairness` | the trigger that gives a new task of a fair share its turn |
| `counts` | counts of a big table: capped, estimated, the queues present |
| `replicas` | `replica_lag()`: how far a streaming replica is behind |
| `each` | `update_each()`, `add_each()`: many rows' own values in one `executemany` |
| `vacuum` | `vacuum_report()`: dead rows, bloat and what holds VACUUM's horizon back (PostgreSQL) |
"""

from . import fairness, inserts, keys
from .admission import lock_admission_key
from .aggregates import Percentile
from .clock import CLOCK_CTE, Clock, Now, now_plus, read_clock
from .conditions import NOT_YIELDED, capped_deadline, due, unexpired
from .connections import discard_connection, has_table, ping
from .counts import capped_counts, estimator, planned_rows, queues_present
from .driver import CAPPED, Driver, driver, driver_class, transaction_pooled
from .each import add_each, update_each
from .lease_terms import LeaseTerms
from .notifications import READY_CHANNEL, STOP_CHANNEL, listen, notify_ready, postgresql_notify
from .portable import json_list_contains, lock_rows, update_returning_pks, upsert
from .postgresql import (
    Cursors,
    compact,
    finish_statement,
    heartbeat_statement,
    lease_statement,
    postgresql_finish,
    postgresql_heartbeat,
    postgresql_lease,
    postgresql_reset,
    postgresql_transition,
    postgresql_yield,
)
from .prepared import prepared_cursor, prepares, use_worker_plans
from .replicas import ReplicaLag, replica_lag
from .retry import DatabaseRetry, migrate_hint
from .sqlite import sqlite_json_each
from .tables import Tables
from .tallies import count_finished
from .transactions import write_atomic
from .vacuum import (
    IDLE_SHOWN,
    HorizonHolder,
    IdleSession,
    TableVacuum,
    VacuumReport,
    idle_in_transaction_timeout,
    vacuum_report,
)

__all__ = [
    "CAPPED",
    "CLOCK_CTE",
    "IDLE_SHOWN",
    "NOT_YIELDED",
    "READY_CHANNEL",
    "STOP_CHANNEL",
    "Clock",
    "Cursors",
    "DatabaseRetry",
    "Driver",
    "HorizonHolder",
    "IdleSession",
    "LeaseTerms",
    "Now",
    "Percentile",
    "ReplicaLag",
    "TableVacuum",
    "Tables",
    "VacuumReport",
    "add_each",
    "capped_counts",
    "capped_deadline",
    "compact",
    "count_finished",
    "discard_connection",
    "driver",
    "driver_class",
    "due",
    "estimator",
    "fairness",
    "finish_statement",
    "has_table",
    "heartbeat_statement",
    "idle_in_transaction_timeout",
    "inserts",
    "json_list_contains",
    "keys",
    "lease_statement",
    "listen",
    "lock_admission_key",
    "lock_rows",
    "migrate_hint",
    "notify_ready",
    "now_plus",
    "ping",
    "planned_rows",
    "postgresql_finish",
    "postgresql_heartbeat",
    "postgresql_lease",
    "postgresql_notify",
    "postgresql_reset",
    "postgresql_transition",
    "postgresql_yield",
    "prepared_cursor",
    "prepares",
    "queues_present",
    "read_clock",
    "replica_lag",
    "sqlite_json_each",
    "transaction_pooled",
    "unexpired",
    "update_each",
    "update_returning_pks",
    "upsert",
    "use_worker_plans",
    "vacuum_report",
    "write_atomic",
]
