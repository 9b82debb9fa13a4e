"""The ORM's driver, for SQLite and MySQL/MariaDB: the operations PostgreSQL makes in one
statement (`postgresql_driver`), each as a transaction that locks, writes the task rows, then
their History rows.

SQLite has no row locks: every write transaction takes the database's write lock when it
begins (`transactions.write_atomic`), so writers are serialised. MySQL/MariaDB 10.6+ lock rows
(`SELECT … FOR UPDATE SKIP LOCKED`, then a conditional UPDATE) and have no partial indexes, so
no unique keys. `SqliteDriver` and `MysqlDriver` differ from `OrmDriver` only in what their
databases can do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.db import IntegrityError, connections, models, transaction
from django.db.models import (
    BooleanField,
    Case,
    Count,
    DateTimeField,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Q,
    QuerySet,
    Value,
    When,
)

from ..enums import TRANSITIONS, EventType, Operation, Status, event, sources
from . import inserts, keys
from .clock import Clock, Now, now_plus, read_clock
from .conditions import NOT_YIELDED, capped_deadline, due, unexpired
from .lease_terms import LeaseTerms
from .portable import update_returning_pks
from .tables import Tables
from .tallies import count_finished
from .transactions import write_atomic

#: Leases per heartbeat statement: a pair of parameters each, well under every vendor's limit.
HEARTBEAT_CHUNK = 500

#: Tasks per statement of a bulk submission.
SUBMIT_CHUNK = 500

#: The kinds of expired leases that make their tasks ready again (`expiry_kind`).
READY_KINDS = ("expired", "unstarted", "yielded")


class OrmDriver:
    """The ORM's portable path (MySQL/MariaDB, and any database without a driver of its own):
    see `driver.Driver`."""

    listens: ClassVar[bool] = False
    estimates_rows: ClassVar[bool] = False
    computes_percentiles: ClassVar[bool] = False
    locks_whole_database: ClassVar[bool] = False
    has_partial_indexes: ClassVar[bool] = False
    has_vacuum_horizon: ClassVar[bool] = False
    judges_caps_in_insert: ClassVar[bool] = False
    submits_keyed_in_one_statement: ClassVar[bool] = False
    finishes_and_leases_at_once: ClassVar[bool] = False
    writes_cursors_in_heartbeat: ClassVar[bool] = False

    def __init__(self, using: str) -> None:
        self.using = using

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.using!r})"

    @property
    def enforces_unique_keys(self) -> bool:
        return bool(connections[self.using].features.supports_partial_indexes)

    def notify(self, channel: str, payloads: Sequence[str]) -> None:
        """Nobody listens here: workers poll."""

    def raise_floors(self, queues: Sequence[str]) -> None:
        """The portable lease keeps no floor."""

    # -- one task ---------------------------------------------------------------------------

    def transition(
        self,
        fenced: QuerySet[Any],
        history: type[models.Model],
        values: dict[str, Any],
        fields: Sequence[str],
        operation: Operation,
        notify: tuple[str, str] | None = None,
        worker: str | None = None,
    ) -> dict[str, Any] | None:
        """The conditional UPDATE, the row read back, and its History row, in one write
        transaction (`notify` is not sent: nobody listens)."""
        transition = TRANSITIONS[operation]
        read = list(dict.fromkeys([*fields, "owner", "progress", "updated"]))
        with write_atomic(self.using):
            changed = update_returning_pks(fenced, {"updated": Clock(), **values})
            if len(changed) != 1:
                return None
            [pk] = changed
            rows = fenced.model._default_manager.using(self.using).filter(pk=pk).values(*read)
            row: dict[str, Any] = rows[0]
            if transition.event is not None:
                history._default_manager.using(self.using).create(
                    task_id=pk,
                    typ=transition.event,
                    worker=worker or row["owner"],
                    progress=row["progress"],
                    time=row["updated"],
                )
        return row

    # -- leases -----------------------------------------------------------------------------

    def lease(self, tables: Tables, terms: LeaseTerms) -> list[Any] | None:
        """As PostgreSQL's lease, with the limited queues' settings locked first."""
        limit = terms.limit
        transition = TRANSITIONS[Operation.LEASE]
        order = ("-priority", "turn", "created", "id")
        using = self.using
        tasks = tables.task._default_manager.using(using)
        with write_atomic(using):
            # Lock the limited queues' settings first (in a fixed order), so that the running
            # tasks counted below cannot change until this lease commits.
            settings = list(
                tables.queue_setting._default_manager.using(using)
                .filter(queue__in=terms.queues)
                .select_for_update()
                .order_by("queue")
                .values_list("queue", "paused", "max_running")
            )
            workers = tables.worker._default_manager.using(using)
            if not workers.filter(pk=terms.worker_id, stopped__isnull=True).exists():
                return None
            paused = {queue for queue, is_paused, _ in settings if is_paused}
            limits = {q: n for q, is_paused, n in settings if n is not None and not is_paused}
            free = [q for q in terms.queues if q not in paused and q not in limits]
            budgets = dict.fromkeys(free, limit)
            if limits:
                running = dict(
                    tasks.filter(status=Status.RUNNING, queue__in=list(limits))
                    .order_by()
                    .values_list("queue")
                    .annotate(n=Count("*"))
                    .values_list("queue", "n")
                )
                for queue, most in limits.items():
                    budgets[queue] = max(0, min(limit, most - running.get(queue, 0)))
            walks = [(free, limit)] if free else []
            walks += [([q], budgets[q]) for q in limits if budgets[q]]
            keyed = ExpressionWrapper(Q(keys__isnull=False), output_field=BooleanField())
            found: list[tuple[int, int, datetime, int, bool, str, timedelta | None, float]] = []
            for walk, size in walks:
                found += (
                    tasks.filter(status=Status.READY, queue__in=walk)
                    .filter(due(), unexpired())
                    # A task whose keys look busy is passed over (the take trigger decides).
                    .filter(keys.free_in_walk(connections[using]))
                    .select_for_update(skip_locked=True)
                    .order_by(*order)
                    .annotate(keyed=keyed)
                    .values_list(
                        "priority", "pk", "created", "pk", "keyed", "queue", "timeout", "turn"
                    )[:size]
                )
            found.sort(key=lambda row: (-row[0], row[7], row[2], row[3]))
            plain = [row[1] for row in found[:limit] if not row[4]]
            with_keys = [row[1] for row in found[:limit] if row[4]]
            ids = plain + with_keys
            if not ids:
                return []
            base = tasks.filter(status__in=sources(Operation.LEASE))
            now = read_clock(using)
            values = {
                "status": transition.target,
                "owner": terms.worker,
                "lease_length": terms.lease_length,
                "leases": F("leases") + 1,
                "handler_started": terms.reservation is None,
                "updated": now,
            }
            # The time past which each lease is never extended (None: no run-time limit).
            caps: dict[int, datetime | None] = {}
            for row in found[:limit]:
                timeout = row[6] if row[6] is not None else terms.timeouts.get(row[5])
                caps[row[1]] = None if timeout is None else now + timeout + terms.timeout_grace

            def capped(cap: datetime | None) -> dict[str, Any]:
                first = terms.lease_length if terms.reservation is None else terms.reservation
                deadline = now + first
                return {
                    "deadline": deadline if cap is None else min(deadline, cap),
                    "timeout_at": cap,
                }

            # The plain tasks in one UPDATE per cap (as many as run-time limits among them).
            by_cap: dict[datetime | None, list[int]] = {}
            for pk in plain:
                by_cap.setdefault(caps[pk], []).append(pk)
            leased = 0
            for cap, pks in by_cap.items():
                leased += base.filter(pk__in=pks).update(**values, **capped(cap))
            # The tasks with keys one at a time, in lease order, so that the take trigger
            # judges each after the ones ahead of it: one UPDATE of them all meets its rows in
            # pk order (SQLite walks `pk IN (...)` sorted), and a later task took an earlier
            # one's room.
            for pk in with_keys:
                leased += base.filter(pk=pk).update(**values, **capped(caps[pk]))
            if leased != len(ids):  # the key trigger passed over tasks whose keys are not free
                ids = list(
                    tasks.filter(
                        pk__in=ids, status=transition.target, owner=terms.worker, updated=now
                    )
                    .order_by()
                    .values_list("pk", flat=True)
                )
            tables.history._default_manager.using(using).bulk_create(
                tables.history(
                    task_id=pk, typ=event(Operation.LEASE), worker=terms.worker, time=now
                )
                for pk in ids
            )
            return list(tasks.filter(pk__in=ids).order_by(*order))

    def lease_rn(
        self, tables: Tables, worker_id: int, worker: str, rn: str, lease_length: timedelta
    ) -> Any | None:
        return lease_rn(tables, self.using, worker_id, worker, rn, lease_length)

    def finish_and_lease(
        self, tables: Tables, terms: LeaseTerms, rows: Sequence[dict[str, Any]]
    ) -> tuple[dict[int, datetime], list[Any]]:
        raise NotImplementedError(
            "The ORM's path finishes, then leases (finishes_and_leases_at_once is false)."
        )

    def finish(
        self, tables: Tables, worker: str, rows: Sequence[dict[str, Any]]
    ) -> dict[int, datetime]:
        """One conditional UPDATE per lease, then the History rows and the batches'
        counters, in one write transaction."""
        using = self.using
        manager = tables.task._default_manager.using(using)
        done: dict[int, datetime] = {}
        with write_atomic(using):
            now = read_clock(using)
            for row in rows:
                completed = row["status"] == Status.COMPLETED
                values: dict[str, Any] = {
                    "status": row["status"],
                    "deadline": None,
                    "cpu_time": row.get("cpu_time"),
                    "peak_memory": row.get("peak_memory"),
                }
                if row.get("log"):
                    values["log"] = row["log"]
                if completed:
                    values.update(progress=1.0, result=row["result"])
                else:
                    values["errors"] = row["errors"]
                fenced = manager.filter(
                    pk=row["id"], status=Status.RUNNING, owner=worker, leases=row["lease"]
                )
                if fenced.update(updated=now, **values):
                    done[row["id"]] = now
            events = {Status.COMPLETED: EventType.COMPLETION, Status.ABORTED: EventType.ABORT}
            written = list(
                manager.filter(pk__in=done).values_list("pk", "status", "progress", "batch_id")
            )
            tables.history._default_manager.using(using).bulk_create(
                tables.history(
                    task_id=pk,
                    typ=events[Status(status)],
                    worker=worker,
                    progress=progress,
                    time=now,
                )
                for pk, status, progress, _ in written
            )
            count_finished(
                tables.batch,
                using,
                [
                    {"batch_id": batch, "status": status}
                    for _, status, _, batch in written
                    if status == Status.COMPLETED
                ],
            )
        return done

    def heartbeat(
        self,
        tables: Tables,
        worker: str,
        leases: Sequence[tuple[int, int, float | None, bool]],
        lease_length: timedelta,
        reservation: timedelta | None = None,
        cursors: Any = None,
    ) -> set[int]:
        """A statement per `HEARTBEAT_CHUNK` leases, each naming its leases (the caller writes
        the `cursors`: never given here)."""
        extended: set[int] = set()
        for start in range(0, len(leases), HEARTBEAT_CHUNK):
            part = leases[start : start + HEARTBEAT_CHUNK]
            extended |= self._heartbeat_chunk(tables, worker, part, lease_length, reservation)
        return extended

    def _heartbeat_chunk(
        self,
        tables: Tables,
        worker: str,
        leases: Sequence[tuple[int, int, float | None, bool]],
        lease_length: timedelta,
        reservation: timedelta | None,
    ) -> set[int]:
        held = Q()
        for pk, lease, _, _ in leases:
            held |= Q(pk=pk, leases=lease)
        fenced = (
            tables.task._default_manager.using(self.using)
            .filter(held, status__in=sources(Operation.HEARTBEAT), owner=worker)
            .filter(NOT_YIELDED)
        )
        started = sorted(pk for pk, _, _, begun in leases if begun)
        full = capped_deadline(now_plus(lease_length))
        values: dict[str, Any] = {"deadline": full, "updated": Now()}
        if reservation is not None:
            # A lease whose handler has not started (nor is told now to have) stays a
            # reservation.
            begun = Q(handler_started=True) | Q(pk__in=started)
            values["deadline"] = Case(
                When(begun, then=full),
                default=capped_deadline(now_plus(reservation)),
                output_field=DateTimeField(),
            )
        if started:
            values["handler_started"] = Case(
                When(pk__in=started, then=Value(True)),
                default=F("handler_started"),
                output_field=BooleanField(),
            )
        progress = [
            When(pk=pk, then=Value(value)) for pk, _, value, _ in leases if value is not None
        ]
        if progress:
            values["progress"] = Case(*progress, default=F("progress"), output_field=FloatField())
        return update_returning_pks(fenced, values)

    def yield_leases(
        self, tables: Tables, worker: str, leases: Sequence[tuple[int, int]]
    ) -> set[int]:
        """One transition per lease, as a single yield."""
        tasks = tables.task._default_manager.using(self.using)
        deadline = capped_deadline(now_plus(timedelta(seconds=-1), Clock))
        yielded: set[int] = set()
        for pk, lease in leases:
            fenced = tasks.filter(
                pk=pk, status__in=sources(Operation.YIELD), owner=worker, leases=lease
            )
            row = self.transition(
                fenced, tables.history, {"deadline": deadline}, ["deadline"], Operation.YIELD
            )
            if row is not None:
                yielded.add(pk)
        return yielded

    def reset(
        self, tables: Tables, rows: Mapping[int, Mapping[str, Any]], max_leases: int | None
    ) -> tuple[datetime | None, dict[int, str]]:
        """Judge the locked expired `rows`, make the expired, unstarted and yielded ones ready
        (an unstarted one's `unstarted` up by one) with a TaskTimeout row for each expired and
        unstarted one, in a few statements."""
        using = self.using
        manager = tables.task._default_manager.using(using)
        history = tables.history._default_manager.using(using)
        # Only a task whose deadline is before its `updated` can have been given back (see
        # NOT_YIELDED); History is read for those alone, after the rows were locked (a fresh
        # snapshot), so a yield that committed while we waited is seen.
        given_back = [pk for pk, row in rows.items() if row["deadline"] < row["updated"]]
        last_ids = (
            history.filter(task_id__in=given_back)
            .values("task_id")
            .annotate(last=Max("id"))
            .values("last")
        )
        yielded = (
            set(
                history.filter(pk__in=last_ids, typ=EventType.YIELD).values_list(
                    "task_id", flat=True
                )
            )
            if given_back
            else set()
        )
        yields: dict[int, int] = (
            dict(
                history.filter(task_id__in=list(rows), typ=EventType.YIELD)
                .values("task_id")
                .annotate(n=Count("id"))
                .values_list("task_id", "n")
            )
            if max_leases is not None
            else {}
        )
        kinds = {
            pk: expiry_kind(row, pk in yielded, max_leases, yields.get(pk, 0))
            for pk, row in rows.items()
        }
        now = read_clock(using)
        ready = [pk for pk, kind in kinds.items() if kind in READY_KINDS]
        fenced = manager.filter(pk__in=ready, status__in=sources(Operation.RESET), deadline__lt=now)
        changed = set(fenced.values_list("pk", flat=True))
        unstarted = [pk for pk in ready if kinds[pk] == "unstarted"]
        fenced.update(
            status=TRANSITIONS[Operation.RESET].target,
            owner=None,
            deadline=None,
            timeout_at=None,
            progress=0.0,
            updated=now,
            unstarted=Case(
                When(pk__in=unstarted, then=F("unstarted") + 1),
                default=F("unstarted"),
                output_field=models.PositiveIntegerField(),
            ),
        )
        history.bulk_create(
            tables.history(
                task_id=pk,
                typ=event(Operation.RESET),
                worker=rows[pk]["owner"],
                progress=rows[pk]["progress"],
                time=now,
            )
            for pk in sorted(changed)
            if kinds[pk] in ("expired", "unstarted")
        )
        kinds = {pk: kind for pk, kind in kinds.items() if pk in changed or pk not in ready}
        return now, kinds

    # -- submissions ------------------------------------------------------------------------

    def submit(
        self, tasks: QuerySet[Any], values: dict[str, Any], *, unless_capped: bool = False
    ) -> tuple[int, datetime, datetime] | str | None:
        """`Model.save(force_insert=True)` in a savepoint; None if the rn exists (any other
        conflict is raised). The caps are the caller's to look up (`unless_capped` is not
        judged here)."""
        task = tasks.model(**values)
        try:
            with transaction.atomic(using=tasks.db):
                task.save(force_insert=True, using=tasks.db)
        except IntegrityError:
            if tasks.model._default_manager.using(tasks.db).filter(rn=task.rn).exists():
                return None
            raise
        created, updated = task.created, task.updated
        if not isinstance(created, datetime) or not isinstance(updated, datetime):
            # Filled in by the database, which did not return them (MySQL/MariaDB).
            found = tasks.model._default_manager.using(tasks.db).filter(pk=task.pk)
            created, updated = found.values_list("created", "updated").get()
        return task.pk, created, updated

    def submit_keyed(
        self, tasks: QuerySet[Any], values: dict[str, Any]
    ) -> tuple[bool, bool, list[Any]] | None:
        raise NotImplementedError(
            "The ORM's path looks the holder up and inserts in one write transaction "
            "(submits_keyed_in_one_statement is false)."
        )

    def submit_many(
        self,
        tasks: QuerySet[Any],
        chunks: Callable[[int], Iterator[list[dict[str, Any]]]],
        capped: set[str],
    ) -> set[str]:
        """One write transaction: an INSERT … ON CONFLICT DO NOTHING RETURNING per chunk where
        the database returns the rows written (SQLite), else a savepoint per task."""
        inserted: set[str] = set()
        with write_atomic(tasks.db):
            for chunk in chunks(SUBMIT_CHUNK):
                if inserts.can_insert_returning_on_conflict(connections[tasks.db]):
                    new = [tasks.model(**values) for values in chunk]
                    inserted |= inserts.insert_ignoring_duplicates(tasks, new)
                    continue
                for values in chunk:
                    try:
                        with transaction.atomic(using=tasks.db):
                            tasks.model(**values).save(force_insert=True, using=tasks.db)
                        inserted.add(values["rn"])
                    except IntegrityError:
                        pass
        return inserted


class SqliteDriver(OrmDriver):
    """SQLite: the ORM's path, with the database's write lock taken at BEGIN (no row locks),
    partial indexes (unique keys), and rows returned by an INSERT or UPDATE."""

    locks_whole_database: ClassVar[bool] = True
    has_partial_indexes: ClassVar[bool] = True


class MysqlDriver(OrmDriver):
    """MySQL/MariaDB 10.6+: the ORM's path, row locks with SKIP LOCKED, no partial indexes
    (so no unique keys)."""


def lease_rn(
    tables: Tables, using: str, worker_id: int, worker: str, rn: str, lease_length: timedelta
) -> Any | None:
    """Lease the ready task `rn` for the worker `worker` (pk `worker_id`), whatever its queue's
    settings and its `not_before` say: a task run by hand. None if it is not ready or the
    worker may not lease. One conditional UPDATE and its History row, in one transaction, on
    every database (the key triggers still refuse a task whose keys are not free)."""
    transition = TRANSITIONS[Operation.LEASE]
    tasks = tables.task._default_manager.using(using)
    with write_atomic(using):
        workers = tables.worker._default_manager.using(using)
        if not workers.filter(pk=worker_id, stopped__isnull=True).exists():
            return None
        now = read_clock(using)
        leased = tasks.filter(rn=rn, status__in=sources(Operation.LEASE)).update(
            status=transition.target,
            owner=worker,
            deadline=now + lease_length,
            # A debug run does not enforce the run-time limit (docs/howto/timeouts.md): no cap,
            # nor one left by an earlier lease.
            timeout_at=None,
            lease_length=lease_length,
            leases=F("leases") + 1,
            handler_started=True,  # run at once, on the caller's thread
            updated=now,
        )
        if not leased:
            return None
        task = tasks.get(rn=rn)
        tables.history._default_manager.using(using).create(
            task_id=task.pk, typ=event(Operation.LEASE), worker=worker, time=now
        )
        return task


def expiry_kind(row: Mapping[str, Any], yielded: bool, max_leases: int | None, yields: int) -> str:
    """How an expired lease is dealt with, as PostgreSQL's reset judges it: `timed_out`
    (it expired at its run-time limit, the cap its lease was given, given back or not: aborted
    with `timeout`, as its worker would have done), `yielded` (given back: made ready without
    a TaskTimeout), `unstarted` (a reservation: its handler was not known to have started, so
    its worker's crash was not the task's doing; made ready with a TaskTimeout, `unstarted` up
    by one, never counted), `exhausted` (the task has had `max_leases` leases; a lease its own
    handler ended with a snooze is not counted, nor one of the task's `yields` earlier leases
    given back, nor its unstarted leases but the first), or `expired` (made ready with a
    TaskTimeout).

    The first unstarted lease of a task counts once the task's handler is known to have run
    when its lease expired: that first one may have been a run of its own that killed its
    worker before the heartbeat could report its start. Every later lease of the task records
    its start before its handler runs (the worker sees `unstarted > 0`), so its later
    unstarted leases are ones its handler surely never began. A poison pill that kills its
    worker at once is thus aborted after `max_leases` runs of its own; a task stranded beside
    it, whose handler never started, is never counted."""
    if row["timeout_at"] is not None and row["deadline"] == row["timeout_at"]:
        return "timed_out"
    if yielded:
        return "yielded"
    if not row["handler_started"]:
        return "unstarted"
    forgiven = max(row["unstarted"] - 1, 0)
    if max_leases is not None and row["leases"] - row["snoozes"] - forgiven - yields >= max_leases:
        return "exhausted"
    return "expired"
