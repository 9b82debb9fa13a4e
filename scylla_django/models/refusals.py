"""Why a worker's write was refused: the error each lease it no longer holds gets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models

from .. import db, validation
from ..enums import Operation, Status, sources
from ..exceptions import (
    InvalidTransition,
    LeaseLost,
    OwnerAlive,
    ScyllaError,
    TaskCancelled,
    TaskNotFound,
)
from .history import finished_by
from .processes import Worker


def refusal_errors(
    tasks: models.QuerySet[Any], name: str, leases: Mapping[int, int]
) -> dict[int, ScyllaError]:
    """Why the worker `name` no longer holds these leases (task pk → lease number), one error
    per pk.

    TaskCancelled for a cancelled task; InvalidTransition for a task this very lease has
    finished already (a write retried after its reply was lost); TaskNotFound for a purged
    one; LeaseLost for everything else (reset, taken over, aborted by the monitor, yielded).
    """
    current = {
        pk: (rn, status, owner, now_lease)
        for pk, rn, status, owner, now_lease in tasks.model.objects.using(tasks.db)
        .filter(pk__in=list(leases))
        .values_list("pk", "rn", "status", "owner", "leases")
    }
    finished = finished_by(name, list(current), tasks.db)
    errors: dict[int, ScyllaError] = {}
    for pk, lease in leases.items():
        if pk not in current:
            errors[pk] = TaskNotFound(f"Task {pk} no longer exists.")
            continue
        rn, status, owner, now_lease = current[pk]
        if status == Status.CANCELLED:
            errors[pk] = TaskCancelled(f"Task {rn} was cancelled.", rn=rn, status=status)
        elif owner == name and now_lease == lease and pk in finished:
            errors[pk] = InvalidTransition(f"Task {rn} is already {status}.", rn=rn, status=status)
        elif status == Status.RUNNING and owner == name and now_lease == lease:
            errors[pk] = LeaseLost(
                f"{name} gave the lease of task {rn} back.", rn=rn, status=status
            )
        else:
            errors[pk] = LeaseLost(
                f"{name} does not hold lease {lease} of task {rn} "
                f"(status {status}, owner {owner}, lease {now_lease}).",
                rn=rn,
                status=status,
            )
    return errors


def lease_reset_refusal(task: Any, owner: str, lease: int, using: str) -> ScyllaError:
    """Why `task.reset_lease(owner, lease)` matched no row."""
    current = (
        type(task)
        ._default_manager.using(using)
        .filter(pk=task.pk)
        .values("status", "owner", "leases")
        .first()
    )
    if current is None:
        return TaskNotFound(f"No task has rn {task.rn!r}.", rn=task.rn)
    status = current["status"]
    if status not in sources(Operation.RESET_LEASE):
        return InvalidTransition(
            f"Cannot reset the lease of task {task.rn}: it is {status}.",
            rn=task.rn,
            status=status,
        )
    if current["owner"] != owner or current["leases"] != lease:
        return LeaseLost(
            f"Task {task.rn} is now held by {current['owner']} under lease "
            f"{current['leases']}, not by {owner} under lease {lease}.",
            rn=task.rn,
            status=status,
        )
    return OwnerAlive(owner_alive_detail(task.rn, owner, using), rn=task.rn, status=status)


def owner_alive_detail(rn: str, owner: str, using: str) -> str:
    """Why the lease of task `rn` may not be reset yet: how old `owner`'s last heartbeat is,
    and when it turns silent (two heartbeat intervals unseen), on the database clock. A
    worker killed a moment ago (SIGKILL) is judged alive until then: it cannot be told apart
    from one that is working."""
    seen = (
        Worker.objects.using(using)
        .filter(pk=validation.worker_id(owner) or 0)
        .values("last_seen", "silent_at")
        .first()
    )
    if seen is None:
        return f"{owner} still heartbeats task {rn}."
    now = db.read_clock(using)
    age = max((now - seen["last_seen"]).total_seconds(), 0.0)
    detail = f"{owner}'s last heartbeat was {age:.0f} s ago: it may still be working on task {rn}"
    if seen["silent_at"] is not None:
        left = max((seen["silent_at"] - now).total_seconds(), 0.0)
        detail += (
            f"; if its process is gone, the lease can be reset once the worker is silent, "
            f"in {left:.0f} s"
        )
    return detail + "."
