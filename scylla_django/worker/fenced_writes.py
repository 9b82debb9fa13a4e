"""The fenced write of outcomes: the statements that end the leases of tasks whose handlers
have run, each row fenced on its own lease (a row whose lease is no longer this worker's is
left alone, and why is read back), alone (`finish_many`) or with the lease that refills the
slots they free (`finish_and_lease`, one statement on PostgreSQL), on the worker's own
connection.
"""

from __future__ import annotations

from django.db import Error as DatabaseError
from django.db import connections

from .. import db
from ..exceptions import ScyllaError
from ..models import Task, Worker
from .bundles import plain_queues
from .database import WorkerConnection
from .options import WorkerOptions
from .outcomes import Outcomes


class FencedWrites:
    """Writes the outcomes of `worker`'s tasks on `connection`."""

    def __init__(
        self, options: WorkerOptions, worker: Worker, connection: WorkerConnection
    ) -> None:
        self.options = options
        self.worker = worker
        self.connection = connection

    def finish(self, outcomes: Outcomes) -> dict[int, ScyllaError]:
        """Write the outcomes; return why each one not written was refused, by pk."""
        using = self.options.using
        with self.connection.used():
            db.use_worker_plans(connections[using])  # a connection of the worker's own
            written = Task.objects.using(using).finish_many(
                self.worker, [outcome for _, outcome in outcomes]
            )
            return self._refusals(outcomes, written)

    def finish_and_lease(
        self, outcomes: Outcomes, limit: int
    ) -> tuple[dict[int, ScyllaError], list[Task]]:
        """Write the outcomes and lease up to `limit` tasks: why each outcome not
        written was refused, by pk, and the tasks leased."""
        using = self.options.using
        with self.connection.used():
            db.use_worker_plans(connections[using])  # a connection of the worker's own
            queues = plain_queues(self.options)  # a bundle handler's queue is its bundler's
            written, tasks = Task.objects.using(using).finish_and_lease(
                self.worker,
                [outcome for _, outcome in outcomes],
                queues,
                limit=limit,
                lease_length=self.options.lease_length,
                timeouts=self.options.registry.queue_timeouts(queues),
                timeout_grace=self.options.timeout_grace,
                reservation=self.options.reservation,
            )
            try:
                return self._refusals(outcomes, written), tasks
            except DatabaseError as exc:  # the tasks are leased: keep them, whatever the reason
                db.discard_connection(using)
                unknown = ScyllaError(f"it was refused, and reading why failed: {exc}")
                return {o.pk: unknown for _, o in outcomes if o.pk not in written}, tasks

    def _refusals(self, outcomes: Outcomes, written: set[int]) -> dict[int, ScyllaError]:
        refused = {o.pk: o.lease for _, o in outcomes if o.pk not in written}
        if not refused:
            return {}
        return Task.objects.using(self.options.using).refusals(self.worker, refused)
