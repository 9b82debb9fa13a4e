"""Task statuses, History event types and the one table of allowed transitions.

The table below is the state machine docs/discussions/correctness.md describes. Every
operation of the models builds its conditional write from its row, and the admin, the API and the
docs read it, so it is the single source of truth.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


class Status(models.TextChoices):
    """The status of a task."""

    READY = "ready", "Ready"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    ABORTED = "aborted", "Aborted"
    CANCELLED = "cancelled", "Cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES: frozenset[Status] = frozenset(
    {Status.COMPLETED, Status.ABORTED, Status.CANCELLED}
)
ACTIVE_STATUSES: frozenset[Status] = frozenset({Status.READY, Status.RUNNING})


class EventType(models.TextChoices):
    """The type (`_typ`) of a History entry.

    TaskAssignment, TaskTimeout and TaskYield drive the lease cycle; the others record the
    remaining transitions for auditing.
    """

    ASSIGNMENT = "TaskAssignment", "Assignment"
    TIMEOUT = "TaskTimeout", "Timeout"
    YIELD = "TaskYield", "Yield"
    COMPLETION = "TaskCompletion", "Completion"
    ABORT = "TaskAbort", "Abort"
    CANCELLATION = "TaskCancellation", "Cancellation"
    # An operator let the tasks after an aborted task of an order key run (not a transition:
    # the task stays aborted).
    ORDER_RELEASE = "TaskOrderRelease", "Order key released"
    SNOOZE = "TaskSnooze", "Snooze"


class Operation(models.TextChoices):
    """Every operation that changes a task."""

    LEASE = "lease"
    HEARTBEAT = "heartbeat"
    LAPSE = "lapse"
    COMPLETE = "complete"
    ABORT = "abort"
    YIELD = "yield"
    CANCEL = "cancel"
    RESET = "reset"
    EXHAUST = "exhaust"
    RESET_LEASE = "reset_lease"
    SNOOZE = "snooze"
    EXPIRE = "expire"


@dataclass(frozen=True)
class Transition:
    """From which statuses an operation may start, where the task ends up, what History records.

    `owner_only`: only the worker holding the lease may apply it (the write is fenced on the
    lease); the others are applied by clients (cancel) or the monitor (reset, exhaust).
    """

    operation: Operation
    sources: frozenset[Status]
    target: Status
    event: EventType | None
    owner_only: bool

    @property
    def recorded(self) -> EventType:
        """The History event this transition records; TypeError for one that records none
        (a heartbeat), which a statement writing History must not be built for."""
        if self.event is None:
            raise TypeError(f"{self.operation} records no History event")
        return self.event


TRANSITIONS: dict[Operation, Transition] = {
    t.operation: t
    for t in [
        Transition(
            operation=Operation.LEASE,
            sources=frozenset({Status.READY}),
            target=Status.RUNNING,
            event=EventType.ASSIGNMENT,
            owner_only=False,
        ),
        Transition(
            operation=Operation.HEARTBEAT,
            sources=frozenset({Status.RUNNING}),
            target=Status.RUNNING,
            event=None,
            owner_only=True,
        ),
        Transition(
            operation=Operation.LAPSE,
            sources=frozenset({Status.RUNNING}),
            target=Status.RUNNING,
            event=None,
            owner_only=True,
        ),
        Transition(
            operation=Operation.COMPLETE,
            sources=frozenset({Status.RUNNING}),
            target=Status.COMPLETED,
            event=EventType.COMPLETION,
            owner_only=True,
        ),
        Transition(
            operation=Operation.ABORT,
            sources=frozenset({Status.RUNNING}),
            target=Status.ABORTED,
            event=EventType.ABORT,
            owner_only=True,
        ),
        Transition(
            operation=Operation.YIELD,
            sources=frozenset({Status.RUNNING}),
            target=Status.RUNNING,
            event=EventType.YIELD,
            owner_only=True,
        ),
        Transition(
            operation=Operation.CANCEL,
            sources=frozenset(ACTIVE_STATUSES),
            target=Status.CANCELLED,
            event=EventType.CANCELLATION,
            owner_only=False,
        ),
        Transition(
            operation=Operation.RESET,
            sources=frozenset({Status.RUNNING}),
            target=Status.READY,
            event=EventType.TIMEOUT,
            owner_only=False,
        ),
        Transition(
            operation=Operation.EXHAUST,
            sources=frozenset({Status.RUNNING}),
            target=Status.ABORTED,
            event=EventType.ABORT,
            owner_only=False,
        ),
        # "Reset lease now": an operator gives back the lease of a dead or silent worker
        # without waiting for its deadline, as the monitor would at expiry.
        Transition(
            operation=Operation.RESET_LEASE,
            sources=frozenset({Status.RUNNING}),
            target=Status.READY,
            event=EventType.TIMEOUT,
            owner_only=False,
        ),
        # A worker puts its task back to ready with a delay: no attempt spent, no timeout.
        Transition(
            operation=Operation.SNOOZE,
            sources=frozenset({Status.RUNNING}),
            target=Status.READY,
            event=EventType.SNOOZE,
            owner_only=True,
        ),
        # The monitor cancels a ready task that was not started before its `expires_at`.
        Transition(
            operation=Operation.EXPIRE,
            sources=frozenset({Status.READY}),
            target=Status.CANCELLED,
            event=EventType.CANCELLATION,
            owner_only=False,
        ),
    ]
}


def sources(operation: Operation) -> list[str]:
    """The statuses `operation` may start from, as values for a `status__in` lookup."""
    return sorted(s.value for s in TRANSITIONS[operation].sources)


def event(operation: Operation) -> EventType:
    """The History event `operation` writes (for the operations that write one)."""
    written = TRANSITIONS[operation].event
    if written is None:
        raise ValueError(f"{operation} writes no History row.")
    return written


class Liveness(models.TextChoices):
    """Whether a registered worker or monitor process is still there, by the database clock.

    `silent`: not seen for two of its heartbeat intervals (it may be stalled or partitioned);
    `dead`: not seen for its lease length (every lease it held has expired); `stopped`: it
    recorded its own stop.
    """

    ALIVE = "alive", "Alive"
    SILENT = "silent", "Silent"
    DEAD = "dead", "Dead"
    STOPPED = "stopped", "Stopped"
