"""`manage.py scylla_tasks` operations on tasks by rn: `cancel`, `retry`, `requeue`,
`discard`, `hold`, `release`, `delete` and `release-order`, each one of the task's transitions
(the same the admin and the API make)."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ...enums import Status
from ...exceptions import InvalidTransition, ScyllaError
from ...models import Task, key_control
from ...text import plural
from .formats import message


def cancel(out: OutputWrapper, options: dict[str, Any]) -> None:
    """ready or running → cancelled, for each task named."""
    each_task(out, options, "cancelled", lambda task: task.cancel())


def retry(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Submit an aborted or cancelled task again, as the next attempt of its chain."""
    successor = Task.objects.get_by_rn(options["rn"]).retry()
    out.write(f"retried {options['rn']} as {successor.rn} (attempt {successor.attempt}, ready)")


def requeue(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Reset the lease of a running task whose worker is gone."""
    task = Task.objects.get_by_rn(options["rn"])
    if task.status != Status.RUNNING or task.owner is None:
        raise CommandError(
            f"Task {task.rn} is {task.status}: only a running task whose worker is gone can "
            "be requeued (retry an aborted or cancelled one)."
        )
    owner = task.owner
    task.reset_lease(owner, task.leases)
    out.write(f"requeued {task.rn}: ready again ({owner} lost its lease)")


def discard(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Let a dead letter go."""
    task = Task.objects.get_by_rn(options["rn"])
    if not Task.objects.filter(pk=task.pk).discard():
        raise InvalidTransition(
            f"Task {task.rn} is not a dead letter ({task.status}).",
            rn=task.rn,
            status=str(task.status),
        )
    out.write(f"discarded {task.rn}: aborted, no longer a dead letter")


def pause(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Pause each ready task named."""
    each_task(out, options, "paused", lambda task: task.pause(by=operator()))


def resume(out: OutputWrapper, options: dict[str, Any]) -> None:
    """End the pause of each task named."""
    each_task(out, options, "resumed", lambda task: task.resume())


def delete(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Delete a ready task that has not started, keeping a record of it."""
    task = Task.objects.get_by_rn(options["rn"])
    record = task.delete_ready(by=operator())
    kept = plural(len(record.history), "History row")
    out.write(f"deleted {record.rn} (queue {record.queue}); its record keeps {kept}")


def release_order(out: OutputWrapper, options: dict[str, Any]) -> None:
    """Release the order key an aborted task holds."""
    task = Task.objects.get_by_rn(options["rn"])
    key_control.release_order(task)
    out.write(f"released the order key {task.order_key} held by {task.rn}: its later tasks may run")


def each_task(
    out: OutputWrapper, options: dict[str, Any], verb: str, act: Callable[[Task], Any]
) -> None:
    """Apply `act(task)` to each task named by `options["rns"]`, in order; one refused
    does not stop the others, and the refusals end the command with an error."""
    rns: list[str] = list(dict.fromkeys(options["rns"]))
    tasks = {t.rn: t for t in Task.objects.filter(rn__in=rns).defer("spec", "result")}
    unknown = [rn for rn in rns if rn not in tasks]
    if unknown:
        raise CommandError(f"No task has rn {', '.join(map(repr, unknown))}: none {verb}.")
    refused = []
    for rn in rns:
        try:
            act(tasks[rn])
        except ScyllaError as exc:
            refused.append(message(exc))
        else:
            out.write(f"{verb} {rn}")
    if refused:
        raise CommandError(" ".join(refused))


def operator() -> str | None:
    """Who runs the command, as the records of a pause or a deletion name them: the login of
    the shell's user, if known."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
