"""The operations on one task, as its page's buttons: reset a lost lease, cancel, release an order
key. Each is a view class that `TaskAdmin.get_urls()` mounts; each takes a POST, then goes back
to the task's page with a message saying what happened."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _

from ..enums import Liveness, Operation, Status, sources
from ..exceptions import InvalidTransition, LeaseLost, OwnerAlive, TaskNotFound
from ..models import Task, Worker, key_control
from ..validation import worker_id
from .console import ConsoleView

logger = logging.getLogger("scylla_django")


# -- the buttons -----------------------------------------------------------------------------


def cancel_buttons(task: Task) -> dict[str, Any]:
    """ "Cancel task" and "Reset lease now", when they apply to `task` now (one query for a
    running task)."""
    buttons: dict[str, Any] = {}
    if task.status in sources(Operation.CANCEL):
        buttons["scylla_cancel_url"] = reverse("admin:scylla_django_task_cancel", args=[task.pk])
    if task.status == Status.RUNNING and task.owner:
        pk = worker_id(task.owner)
        # An owner that is not a worker name, or no longer registered, counts as dead.
        state = Worker(pk=pk).current_state() if pk is not None else Liveness.DEAD.value
        if state != Liveness.ALIVE:
            buttons.update(
                scylla_reset_url=reverse("admin:scylla_django_task_reset_lease", args=[task.pk]),
                scylla_owner=task.owner,
                scylla_owner_state=state,
                scylla_lease=task.leases,
            )
    return buttons


def order_button(task: Task) -> dict[str, Any]:
    """ "Release order key", for a task that aborted for good holding its order key."""
    if task.status != Status.ABORTED or not task.order_block or task.order_key is None:
        return {}
    if Task.objects.filter(retry_of=task.rn).exists():
        return {}
    return {
        "scylla_release_order_url": reverse(
            "admin:scylla_django_task_release_order", args=[task.pk]
        ),
        "scylla_order_key": task.order_key,
    }


# -- the views -------------------------------------------------------------------------------


class TaskOperationView(ConsoleView):
    """A button of the task's page: a POST on the task `pk`, by a user who may cancel tasks."""

    http_method_names = ["post"]

    def permitted(self, request: HttpRequest) -> bool:
        return bool(self.model_admin.has_cancel_permission(request))

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        task = Task.objects.filter(pk=pk).first()
        if task is None:
            raise Http404(f"No task has id {pk}.")
        self.operate(request, task)
        return HttpResponseRedirect(reverse("admin:scylla_django_task_change", args=[task.pk]))

    def operate(self, request: HttpRequest, task: Task) -> None:
        """Apply the operation to `task`, and say how it went."""
        raise NotImplementedError


class ResetLeaseView(TaskOperationView):
    """POST owner and lease: `Task.reset_lease(owner, lease)`, fenced on what the page showed.
    Refused (with a message) if the owner is alive again or the lease changed."""

    def operate(self, request: HttpRequest, task: Task) -> None:
        owner = request.POST.get("owner", "")
        lease = request.POST.get("lease", "")
        if not owner or not lease.isdigit() or len(lease) > 9:
            self.say(request, _("The reset needs the owner and lease shown."), messages.ERROR)
            return
        try:
            task.reset_lease(owner, int(lease))
        except (OwnerAlive, LeaseLost, InvalidTransition, TaskNotFound) as exc:
            self.say(request, _("Lease not reset: %(reason)s") % {"reason": exc}, messages.ERROR)
            return
        logger.info("%s reset the lease of %s held by %s", request.user, task.rn, owner)
        self.say(
            request,
            _("Lease reset: %(rn)s is ready again (%(owner)s lost it).")
            % {"rn": task.rn, "owner": owner},
            messages.SUCCESS,
        )


class CancelView(TaskOperationView):
    """POST: `Task.cancel()`; a task no longer ready or running is refused with a message."""

    def operate(self, request: HttpRequest, task: Task) -> None:
        try:
            task.cancel()
        except (InvalidTransition, TaskNotFound) as exc:
            self.say(request, _("Not cancelled: %(reason)s") % {"reason": exc}, messages.ERROR)
            return
        logger.info("%s cancelled %s", request.user, task.rn)
        self.say(request, _("Cancelled %(rn)s.") % {"rn": task.rn}, messages.SUCCESS)


class ReleaseOrderView(TaskOperationView):
    """POST: `key_control.release_order(task)`, by a user who may control queues."""

    def permitted(self, request: HttpRequest) -> bool:
        return bool(self.model_admin.has_control_permission(request))

    def operate(self, request: HttpRequest, task: Task) -> None:
        try:
            key_control.release_order(task)
        except (InvalidTransition, TaskNotFound) as exc:
            self.say(request, f"Not released: {exc}", messages.ERROR)
            return
        logger.info("%s released the order key %s of %s", request.user, task.order_key, task.rn)
        self.say(
            request,
            f"Order key {task.order_key} released: the tasks after {task.rn} may run.",
            messages.SUCCESS,
        )
