"""Task statuses, History event types and the one table of allowed transitions.

The table below is the state machine of SPEC §3. The model methods build their conditional WHERE
clauses from it, and the admin, the API and the docs read it, so it is the single source of truth.
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

    The first three are the seed's; the others record the remaining transitions for auditing.
    """

    ASSIGNMENT = "TaskAssignment", "Assignment"
    TIMEOUT = "TaskTimeout", "Timeout"
    YIELD = "TaskYield", "Yield"
    COMPLETION = "TaskCompletion", "Completion"
    ABORT = "TaskAbort", "Abort"
    CANCELLATION = "TaskCancellation", "Cancellation"


class Operation(models.TextChoices):
    """Every operation that changes a task."""

    LEASE = "lease"
    HEARTBEAT = "heartbeat"
    COMPLETE = "complete"
    ABORT = "abort"
    YIELD = "yield"
    CANCEL = "cancel"
    RESET = "reset"
    EXHAUST = "exhaust"
    RESET_LEASE = "reset_lease"


@dataclass(frozen=True)
class Transition:
    """Who may apply an operation, from which statuses, and where the task ends up."""

    operation: Operation
    sources: frozenset[Status]
    target: Status
    actor: str
    event: EventType | None
    owner_only: bool


TRANSITIONS: dict[Operation, Transition] = {
    t.operation: t
    for t in [
        Transition(
            Operation.LEASE,
            frozenset({Status.READY}),
            Status.RUNNING,
            "worker",
            EventType.ASSIGNMENT,
            False,
        ),
        Transition(
            Operation.HEARTBEAT, frozenset({Status.RUNNING}), Status.RUNNING, "owner", None, True
        ),
        Transition(
            Operation.COMPLETE,
            frozenset({Status.RUNNING}),
            Status.COMPLETED,
            "owner",
            EventType.COMPLETION,
            True,
        ),
        Transition(
            Operation.ABORT,
            frozenset({Status.RUNNING}),
            Status.ABORTED,
            "owner",
            EventType.ABORT,
            True,
        ),
        Transition(
            Operation.YIELD,
            frozenset({Status.RUNNING}),
            Status.RUNNING,
            "owner",
            EventType.YIELD,
            True,
        ),
        Transition(
            Operation.CANCEL,
            frozenset(ACTIVE_STATUSES),
            Status.CANCELLED,
            "client",
            EventType.CANCELLATION,
            False,
        ),
        Transition(
            Operation.RESET,
            frozenset({Status.RUNNING}),
            Status.READY,
            "monitor",
            EventType.TIMEOUT,
            False,
        ),
        Transition(
            Operation.EXHAUST,
            frozenset({Status.RUNNING}),
            Status.ABORTED,
            "monitor",
            EventType.ABORT,
            False,
        ),
        # "Reset lease now": an operator gives back the lease of a dead or silent worker
        # without waiting for its deadline, as the monitor would at expiry.
        Transition(
            Operation.RESET_LEASE,
            frozenset({Status.RUNNING}),
            Status.READY,
            "operator",
            EventType.TIMEOUT,
            False,
        ),
    ]
}


def sources(operation: Operation) -> list[str]:
    """The statuses `operation` may start from, as values for a `status__in` lookup."""
    return sorted(s.value for s in TRANSITIONS[operation].sources)


class Liveness(models.TextChoices):
    """Whether a registered worker or monitor process is still there, by the database clock.

    `silent`: not seen for two of its heartbeat intervals (it may be stalled or partitioned);
    `dead`: not seen for its lease timeout (every lease it held has expired); `stopped`: it
    recorded its own stop.
    """

    ALIVE = "alive", "Alive"
    SILENT = "silent", "Silent"
    DEAD = "dead", "Dead"
    STOPPED = "stopped", "Stopped"
