"""Who may do what, with Django permissions an operator grants in the admin.

| permission | lets a user |
|---|---|
| `scylla_django.view_task` | list tasks, read one with its history, read the queue counts |
| `scylla_django.submit_task` | submit tasks, one or in bulk |
| `scylla_django.cancel_task` | cancel tasks |
| `scylla_django.cancel_own_task` | cancel the tasks they submitted (and no others) |
| `scylla_django.work_task` | register workers, and lease, heartbeat, complete, abort and yield |
| `scylla_django.control_queue` | pause, resume and limit queues; hold and release one task |
| `scylla_django.delete_task` | delete a task that has not started (`DELETE /tasks/{rn}/`) |

A worker operation names its worker (`worker-<n>`). Only the user who registered that worker
over HTTP may act as it; staff users with `work_task` may act as any worker (operators), which
also covers the workers that `manage.py scylla_worker` registers without a user. A worker
further acts only on tasks it holds: the model refuses the others with `lease_lost`.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.utils.translation import gettext_lazy
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from ..models import Worker

VIEW = "scylla_django.view_task"
SUBMIT = "scylla_django.submit_task"
CANCEL = "scylla_django.cancel_task"
CANCEL_OWN = "scylla_django.cancel_own_task"
WORK = "scylla_django.work_task"
CONTROL = "scylla_django.control_queue"
DELETE = "scylla_django.delete_task"


class HasActionPermission(BasePermission):
    """The user is authenticated and holds the permission the view names for this action.

    The view maps each action to a codename in `required_permissions`, or to a tuple of
    codenames any one of which will do; an action it does not map (e.g. an unsupported
    method, answered with 405) needs authentication only.
    """

    message = gettext_lazy("You do not have permission to perform this action.")
    code = "permission_denied"

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        required: dict[str, str | tuple[str, ...]] = getattr(view, "required_permissions", {})
        action = getattr(view, "action", None) or (request.method or "").lower()
        perm = required.get(action)
        if perm is None:
            return True
        return any(has_perm(user, p) for p in ((perm,) if isinstance(perm, str) else perm))


class ActsAsOwnWorker(BasePermission):
    """The worker the request names is the user's own (or the user is a staff operator)."""

    message = gettext_lazy("This worker was registered by another user.")
    code = "not_your_worker"

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        if not isinstance(obj, Worker):
            return True
        return may_act_as(request.user, obj)


def may_act_as(user: AbstractBaseUser | AnonymousUser, worker: Worker) -> bool:
    """Whether `user` may act as `worker`: they registered it, or they are a staff operator."""
    if not user.is_authenticated:
        return False
    if worker.user_id is not None and worker.user_id == user.pk:
        return True
    return bool(getattr(user, "is_staff", False)) and has_perm(user, WORK)


def may_cancel(user: AbstractBaseUser | AnonymousUser, submitted_by: object) -> bool:
    """Whether `user` may cancel a task submitted by the user whose pk is `submitted_by`
    (None: not a user's): with `cancel_task` any task, with `cancel_own_task` their own."""
    if has_perm(user, CANCEL):
        return True
    return submitted_by is not None and submitted_by == user.pk and has_perm(user, CANCEL_OWN)


def has_perm(user: AbstractBaseUser | AnonymousUser, perm: str) -> bool:
    """`user.has_perm(perm)`, for any user model (the permission API is not on the base)."""
    check = getattr(user, "has_perm", None)
    return callable(check) and bool(check(perm))
