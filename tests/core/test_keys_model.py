"""A model of keyed tasks, checked against the database by Hypothesis: tasks submitted with locks,
a limit, order keys and a rate are leased, completed, aborted, yielded, reset, cancelled and
retried in random orders, and after every step the database must agree with the model.

The model knows, for every task, its status and keys. Every task a lease starts must be free in the
model beside the tasks running and those the lease started before it: no exclusive lock held twice
nor beside a shared holder, the limit not exceeded, no other task of its order key running nor an
earlier one ready (or aborted for good, blocking, and not retried), the rate not spent. After each
step the database must agree with the model on every status, its running tasks' keys must show
none of those overlaps, and a lease must leave nothing leasable behind: when it leases nothing, no
ready task's keys were free. PostgreSQL and SQLite."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from scylla_django.models import History, Hold, Key, Task, Worker
from tests.helpers import expire

pytestmark = [pytest.mark.django_db, pytest.mark.keys]

QUEUE = "model"
STRIPE = 2  # the limit's size
BURST = 3  # the rate's count (per hour: within one run, the rate allows BURST starts in all)
LOCKS = ["invoice:1", "invoice:2", "ledger"]
ORDERS = ["customer:1", "customer:2"]
WORKERS = 2

lock_lists = st.lists(
    st.tuples(st.sampled_from(LOCKS), st.sampled_from(["exclusive", "shared"])),
    max_size=2,
    unique_by=lambda lock: lock[0],
)


@dataclass
class Modelled:
    """What the model knows of one task."""

    pk: int
    locks: dict[str, str]  # name -> "exclusive" | "shared"
    limited: bool
    order_key: str | None
    place: int  # its place among the tasks of its order key
    block: bool  # an abort for good holds the order key
    rated: bool
    status: str = "ready"
    worker: int | None = None
    lease: int = 0
    yielded: bool = False
    retried: bool = False
    options: dict[str, Any] = field(default_factory=dict)


class KeysModel(RuleBasedStateMachine):
    """The database against the model, one transition at a time."""

    def __init__(self) -> None:
        super().__init__()
        Task.objects.all().delete()
        History.objects.all().delete()
        Key.objects.all().delete()
        Hold.objects.all().delete()
        self.workers = [
            Worker.objects.register(queues=[QUEUE], capacity=5, pid=1000 + n)
            for n in range(WORKERS)
        ]
        self.tasks: dict[int, Modelled] = {}
        self.rate_starts = 0
        self.leased_nothing_while_free: list[int] = []

    # -- what the model says -------------------------------------------------------------------
    def running(self) -> list[Modelled]:
        return [t for t in self.tasks.values() if t.status == "running"]

    def blocks_order(self, other: Modelled, task: Modelled) -> bool:
        """`other` keeps `task` (of the same order key) from running."""
        if other.status == "running":
            return True
        earlier = other.place < task.place
        if other.status == "ready":
            return earlier
        return other.status == "aborted" and other.block and earlier and not other.retried

    def free(self, task: Modelled, running: list[Modelled]) -> bool:
        """Whether `task` may start beside the `running` tasks."""
        for name, mode in task.locks.items():
            for other in running:
                held = other.locks.get(name)
                if held is not None and (mode == "exclusive" or held == "exclusive"):
                    return False
        if task.limited and sum(other.limited for other in running) >= STRIPE:
            return False
        if task.rated and self.rate_starts >= BURST:
            return False
        if task.order_key is not None:
            for other in self.tasks.values():
                if (
                    other.pk != task.pk
                    and other.order_key == task.order_key
                    and self.blocks_order(other, task)
                ):
                    return False
        return True

    def pick(self, data: st.DataObject, status: str) -> Modelled:
        choices = sorted(pk for pk, t in self.tasks.items() if t.status == status)
        return self.tasks[data.draw(st.sampled_from(choices))]

    def has(self, status: str) -> bool:
        return any(t.status == status for t in self.tasks.values())

    # -- rules ---------------------------------------------------------------------------------
    @rule(
        locks=lock_lists,
        limited=st.booleans(),
        order_key=st.none() | st.sampled_from(ORDERS),
        block=st.booleans(),
        rated=st.booleans(),
    )
    def submit(
        self,
        locks: list[tuple[str, str]],
        limited: bool,
        order_key: str | None,
        block: bool,
        rated: bool,
    ) -> None:
        options: dict[str, Any] = {
            "locks": locks or None,
            "limits": ["stripe"] if limited else None,
        }
        if order_key is not None:
            options.update(order_key=order_key, order_on_failure="block" if block else "continue")
        if rated:
            options["rate_key"] = "burst"
        task = Task.objects.submit(QUEUE, len(self.tasks), **options)
        self.tasks[task.pk] = Modelled(
            pk=task.pk,
            locks=dict(locks),
            limited=limited,
            order_key=order_key,
            place=task.pk,
            block=block,
            rated=rated,
        )

    @rule(worker=st.integers(0, WORKERS - 1), limit=st.integers(1, 4))
    def lease(self, worker: int, limit: int) -> None:
        running = self.running()
        any_free = any(self.free(t, running) for t in self.tasks.values() if t.status == "ready")
        leased = Task.objects.lease(
            self.workers[worker], [QUEUE], limit=limit, lease_length=timedelta(minutes=5)
        )
        assert len(leased) <= limit
        if any_free and not leased:
            self.leased_nothing_while_free.append(len(self.tasks))
        for task in leased:
            modelled = self.tasks[task.pk]
            assert modelled.status == "ready", (task.pk, modelled.status)
            # Judged beside the tasks running before and those this lease took before it.
            assert self.free(modelled, self.running()), (task.pk, modelled)
            modelled.status, modelled.worker, modelled.lease = "running", worker, task.leases
            modelled.yielded = False
            self.rate_starts += modelled.rated

    @precondition(lambda self: self.has("running"))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        task = self.pick(data, "running")
        assert task.worker is not None
        Task.objects.get(pk=task.pk).complete(self.workers[task.worker], lease=task.lease)
        task.status = "completed"

    @precondition(lambda self: self.has("running"))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        task = self.pick(data, "running")
        assert task.worker is not None
        Task.objects.get(pk=task.pk).abort(
            self.workers[task.worker], {"code": "boom"}, retry=False, lease=task.lease
        )
        task.status = "aborted"

    @precondition(lambda self: any(t.status == "running" and not t.yielded for t in self.running()))
    @rule(data=st.data())
    def yield_lease(self, data: st.DataObject) -> None:
        choices = sorted(t.pk for t in self.running() if not t.yielded)
        task = self.tasks[data.draw(st.sampled_from(choices))]
        assert task.worker is not None
        Task.objects.get(pk=task.pk).yield_lease(self.workers[task.worker], lease=task.lease)
        task.yielded = True  # still running, keys held, until the monitor's reset

    @rule(data=st.data())
    def reset(self, data: st.DataObject) -> None:
        """The monitor's pass, after the lease of one running task (if any) ran out."""
        expired = [t for t in self.running() if t.yielded]
        if self.has("running") and data.draw(st.booleans()):
            task = self.pick(data, "running")
            expire(Task.objects.get(pk=task.pk))
            if task not in expired:
                expired.append(task)
        assert Task.objects.reset_expired() == len(expired)
        for task in expired:
            task.status, task.worker, task.yielded = "ready", None, False

    @precondition(lambda self: self.has("ready") or self.has("running"))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        statuses = [status for status in ("ready", "running") if self.has(status)]
        task = self.pick(data, data.draw(st.sampled_from(statuses)))
        Task.objects.get(pk=task.pk).cancel()
        task.status = "cancelled"

    @precondition(
        lambda self: any(t.status == "aborted" and not t.retried for t in self.tasks.values())
    )
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        choices = sorted(
            pk for pk, t in self.tasks.items() if t.status == "aborted" and not t.retried
        )
        task = self.tasks[data.draw(st.sampled_from(choices))]
        successor = Task.objects.get(pk=task.pk).retry()
        task.retried = True
        self.tasks[successor.pk] = Modelled(
            pk=successor.pk,
            locks=task.locks,
            limited=task.limited,
            order_key=task.order_key,
            place=task.place,  # a retry keeps its predecessor's place
            block=task.block,
            rated=task.rated,
        )

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def the_database_agrees_with_the_model(self) -> None:
        rows = dict(Task.objects.values_list("pk", "status"))
        assert rows == {pk: t.status for pk, t in self.tasks.items()}

    @invariant()
    def no_key_is_overtaken(self) -> None:
        """Read from the database alone: the running tasks' keys."""
        running = list(Task.objects.filter(status="running").values_list("pk", "keys"))
        exclusive: Counter[str] = Counter()
        shared: Counter[str] = Counter()
        orders: Counter[str] = Counter()
        slots = 0
        for _, elements in running:
            for element in elements or []:
                kind, name = element[:2], element[2:]
                if kind == "L:":
                    exclusive[name] += 1
                elif kind == "S:":
                    shared[name] += 1
                elif kind == "C:":
                    slots += 1
                elif kind == "O:":
                    orders[name] += 1
        for name, n in exclusive.items():
            assert n == 1 and not shared[name], f"lock {name}: {n} exclusive, {shared[name]} shared"
        assert slots <= STRIPE
        assert all(n == 1 for n in orders.values()), orders

    @invariant()
    def the_rate_is_never_exceeded(self) -> None:
        rated = [pk for pk, e in Task.objects.values_list("pk", "keys") if "R:burst" in (e or [])]
        starts = History.objects.filter(typ="TaskAssignment", task_id__in=rated).count()
        assert starts == self.rate_starts <= BURST

    @invariant()
    def a_lease_leaves_no_free_task_behind(self) -> None:
        assert self.leased_nothing_while_free == []


def test_keys_hold_in_every_order_hypothesis_finds(settings) -> None:
    settings.SCYLLA = {"LIMITS": {"stripe": STRIPE}, "RATES": {"burst": f"{BURST}/h"}}
    run_state_machine_as_test(
        KeysModel,
        settings=hypothesis_settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
