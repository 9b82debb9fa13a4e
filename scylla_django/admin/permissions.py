"""Who may do what in the task console, by Django permission. `TaskAdmin` answers Django's
`has_<name>_permission` questions with these, and its actions name them (`permissions=[…]`)."""

from __future__ import annotations

from django.http import HttpRequest


def may_cancel(request: HttpRequest) -> bool:
    """May cancel tasks: `scylla_django.cancel_task`."""
    return request.user.has_perm("scylla_django.cancel_task")


def may_cancel_own(request: HttpRequest) -> bool:
    """May cancel tasks, or at least the ones they submitted: `scylla_django.cancel_task` or
    `scylla_django.cancel_own_task`."""
    return may_cancel(request) or request.user.has_perm("scylla_django.cancel_own_task")


def may_purge(request: HttpRequest) -> bool:
    """May delete terminal tasks: `scylla_django.delete_task`."""
    return request.user.has_perm("scylla_django.delete_task")


def may_submit(request: HttpRequest) -> bool:
    """May submit tasks, and so retry them: `scylla_django.submit_task`."""
    return request.user.has_perm("scylla_django.submit_task")


def may_control(request: HttpRequest) -> bool:
    """May change limits, rates, holds and order keys, and pause and resume queues:
    `scylla_django.control_queue`."""
    return request.user.has_perm("scylla_django.control_queue")
