"""What an operator does to tasks: the list's actions and the page's buttons (cancel, retry, purge,
reset a lease), and pausing a queue."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import django
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..conf import scylla_settings
from ..durations import short
from ..enums import TERMINAL_STATUSES, Liveness, Operation, Status, sources
from ..exceptions import InvalidTransition, LeaseLost, OwnerAlive, TaskNotFound
from ..models import PAUSED, QueueSetting, Task, TaskQuerySet, Worker, key_control
from ..validation import worker_id
from .display import (
    TaskAdminBase,
)
from .purge import TimedPurge
from .schedules import retry_selected as retry_tasks

logger = logging.getLogger("scylla_django")


class TaskOperations(TaskAdminBase):
    """What an operator does to tasks: the list's actions and the page's buttons (cancel, retry,
    purge, reset a lease), and pausing a queue. A part of `TaskAdmin`."""

    # About 500,000 tasks a request at the 25,000/s measured (docs/howto/admin.md); for more, there
    # is scylla_cleanup.
    purge_time_budget = timedelta(seconds=20)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """May cancel tasks: `scylla_django.cancel_task`."""
        return request.user.has_perm("scylla_django.cancel_task")

    def has_cancel_own_permission(self, request: HttpRequest) -> bool:
        """May cancel tasks, or at least the ones they submitted: `scylla_django.cancel_task`
        or `scylla_django.cancel_own_task`."""
        return self.has_cancel_permission(request) or request.user.has_perm(
            "scylla_django.cancel_own_task"
        )

    def has_purge_permission(self, request: HttpRequest) -> bool:
        """May delete terminal tasks: `scylla_django.delete_task`."""
        return request.user.has_perm("scylla_django.delete_task")

    def has_submit_permission(self, request: HttpRequest) -> bool:
        """May submit tasks, and so retry them: `scylla_django.submit_task`."""
        return request.user.has_perm("scylla_django.submit_task")

    def console_links(self, request: HttpRequest) -> dict[str, str]:
        """URLs of the dashboard and the bulk purge page, for the users who may use them."""
        links = {}
        if self.has_view_permission(request):
            links["scylla_dashboard_url"] = reverse("admin:scylla_django_task_dashboard")
            links["scylla_keys_url"] = reverse("admin:scylla_django_task_keys")
        if self.has_purge_permission(request):
            links["scylla_purge_url"] = reverse("admin:scylla_django_task_purge")
        return links

    @admin.action(
        permissions=["cancel_own"],
        description=gettext_lazy("Cancel selected (ready/running only)"),
    )
    def cancel_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        """Cancel the selected ready and running tasks with `TaskQuerySet.cancel()`; a user
        with `cancel_own_task` only cancels the ones they submitted (the others are skipped)."""
        selected = queryset.order_by()
        total = selected.count()
        if not self.has_cancel_permission(request):
            selected = selected.filter(origin__user=request.user.pk)
        cancelled = selected.cancel()
        logger.info("%s cancelled %d of %d selected tasks", request.user, cancelled, total)
        self.message_user(
            request,
            _("%(cancelled)d cancelled, %(skipped)d skipped (not ready or running).")
            % {"cancelled": cancelled, "skipped": total - cancelled},
            messages.SUCCESS if cancelled else messages.WARNING,
        )

    @admin.action(
        permissions=["submit"], description=gettext_lazy("Retry selected (aborted/cancelled only)")
    )
    def retry_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        """Resubmit the selected aborted and cancelled tasks with `Task.retry()`."""
        retry_tasks(self, request, queryset)

    @admin.action(permissions=["cancel"], description=gettext_lazy("Discard selected dead letters"))
    def discard_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        """Let the selected dead letters go (`TaskQuerySet.discard()`): they stay aborted and
        are purged after the retention. To run one again, retry it instead."""
        total = queryset.count()
        discarded = queryset.discard()
        logger.info("%s discarded %d of %d selected tasks", request.user, discarded, total)
        self.message_user(
            request,
            _("%(discarded)d discarded, %(skipped)d skipped (not dead letters).")
            % {"discarded": discarded, "skipped": total - discarded},
            messages.SUCCESS if discarded else messages.WARNING,
        )

    @admin.action(permissions=["purge"], description=gettext_lazy("Purge selected (terminal only)"))
    def purge_selected(
        self, request: HttpRequest, queryset: TaskQuerySet
    ) -> TemplateResponse | None:
        """Delete the selected terminal tasks, with their History, by `TaskQuerySet.purge()`.

        As Django's own delete action does, it first shows how many tasks would go and asks for
        a confirmation, which posts the same selection back with `post=yes`.
        """
        selected = queryset.order_by()
        total = selected.count()
        if request.POST.get("post") != "yes":
            return self.purge_selected_confirmation(request, selected, total)
        run = TimedPurge(self.purge_time_budget)
        # Whatever their age, dead letters too: the selection, not the retention, says what
        # goes.
        finished = run.run(
            lambda **kw: selected.purge(older_than=timedelta.resolution, dead=True, **kw)
        )
        logger.info("%s purged %d of %d selected tasks", request.user, run.deleted, total)
        if finished:
            self.message_user(
                request,
                _("%(purged)d purged, %(skipped)d skipped (not terminal).")
                % {"purged": run.deleted, "skipped": total - run.deleted},
                messages.SUCCESS if run.deleted else messages.WARNING,
            )
        else:
            self.message_user(
                request,
                _(
                    "%(purged)d purged, then stopped after %(seconds)s: run the action again "
                    "for the rest."
                )
                % {"purged": run.deleted, "seconds": short(run.seconds)},
                messages.WARNING,
            )
        return None

    def purge_selected_confirmation(
        self, request: HttpRequest, selected: TaskQuerySet, total: int
    ) -> TemplateResponse:
        """The page that counts what "Purge selected" would delete, and asks to go on."""
        count = selected.filter(status__in=[s.value for s in TERMINAL_STATUSES]).count()
        context = {
            **self.page_context(request, _("Purge selected tasks")),
            "count": count,
            "skipped": total - count,
            "chunk_size": scylla_settings.PURGE_CHUNK_SIZE,
            "selected": request.POST.getlist(ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across") == "1",
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "back_url": request.get_full_path(),
        }
        return TemplateResponse(request, "scylla_django/admin/purge_selected.html", context)

    def buttons(self, task: Task) -> dict[str, Any]:
        """The task page's operations that apply to `task` now (one query for a running task)."""
        buttons: dict[str, Any] = {}
        if task.status in sources(Operation.CANCEL):
            buttons["scylla_cancel_url"] = reverse(
                "admin:scylla_django_task_cancel", args=[task.pk]
            )
        if task.status == Status.RUNNING and task.owner:
            pk = worker_id(task.owner)
            # An owner that is not a worker name, or no longer registered, counts as dead.
            state = Worker(pk=pk).current_state() if pk is not None else Liveness.DEAD.value
            if state != Liveness.ALIVE:
                buttons.update(
                    scylla_reset_url=reverse(
                        "admin:scylla_django_task_reset_lease", args=[task.pk]
                    ),
                    scylla_owner=task.owner,
                    scylla_owner_state=state,
                    scylla_lease=task.leases,
                )
        return buttons

    def operated_task(self, request: HttpRequest, pk: int) -> Task:
        """The task a button posts to, once the method and permission are checked."""
        if request.method != "POST":
            raise PermissionDenied
        if not self.has_cancel_permission(request):
            raise PermissionDenied
        task = Task.objects.filter(pk=pk).first()
        if task is None:
            raise Http404(f"No task has id {pk}.")
        return task

    def reset_lease_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST owner and lease: `Task.reset_lease(owner, lease)`, fenced on what the page
        showed. Refused (with a message) if the owner is alive again or the lease changed."""
        task = self.operated_task(request, pk)
        owner = request.POST.get("owner", "")
        lease = request.POST.get("lease", "")
        back = reverse("admin:scylla_django_task_change", args=[task.pk])
        if not owner or not lease.isdigit() or len(lease) > 9:
            self.message_user(
                request, _("The reset needs the owner and lease shown."), messages.ERROR
            )
            return HttpResponseRedirect(back)
        try:
            task.reset_lease(owner, int(lease))
        except (OwnerAlive, LeaseLost, InvalidTransition, TaskNotFound) as exc:
            self.message_user(
                request, _("Lease not reset: %(reason)s") % {"reason": exc}, messages.ERROR
            )
            return HttpResponseRedirect(back)
        logger.info("%s reset the lease of %s held by %s", request.user, task.rn, owner)
        self.message_user(
            request,
            _("Lease reset: %(rn)s is ready again (%(owner)s lost it).")
            % {"rn": task.rn, "owner": owner},
            messages.SUCCESS,
        )
        return HttpResponseRedirect(back)

    def cancel_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST: `Task.cancel()`; a task no longer ready or running is refused with a message."""
        task = self.operated_task(request, pk)
        back = reverse("admin:scylla_django_task_change", args=[task.pk])
        try:
            task.cancel()
        except (InvalidTransition, TaskNotFound) as exc:
            self.message_user(
                request, _("Not cancelled: %(reason)s") % {"reason": exc}, messages.ERROR
            )
            return HttpResponseRedirect(back)
        logger.info("%s cancelled %s", request.user, task.rn)
        self.message_user(request, _("Cancelled %(rn)s.") % {"rn": task.rn}, messages.SUCCESS)
        return HttpResponseRedirect(back)

    def has_control_permission(self, request: HttpRequest) -> bool:
        """May change limits, rates, holds and order keys: `scylla_django.control_queue`."""
        return request.user.has_perm("scylla_django.control_queue")

    @admin.action(
        permissions=["control"],
        description="Release order key (aborted for good, order_on_failure=block)",
    )
    def release_order_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        """Let the later tasks of each selected task's order key run (`release_order`): one
        conditional write each; the tasks that hold no order key are skipped."""
        held = queryset.order_by("pk").filter(status=Status.ABORTED, order_block=True)
        released = 0
        for task in held.defer("spec", "result", "errors")[: self.list_per_page * 10]:
            try:
                key_control.release_order(task)
            except (InvalidTransition, TaskNotFound):
                continue
            released += 1
        total = queryset.order_by().count()
        logger.info("%s released the order keys of %d tasks", request.user, released)
        self.message_user(
            request,
            f"{released} order keys released, {total - released} skipped (holding none).",
            messages.SUCCESS if released else messages.WARNING,
        )

    @admin.action(permissions=["control"], description=gettext_lazy("Pause selected (ready only)"))
    def pause_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        """Keep the selected ready tasks from every lease (`Task.pause()`), one fenced
        transaction each; the others (not ready, paused already, waiting for parents) are
        skipped."""
        self.each_selected(request, queryset, "paused", lambda t: t.pause(by=str(request.user)))

    @admin.action(permissions=["control"], description=gettext_lazy("Resume selected paused tasks"))
    def resume_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        """End the pause of the selected paused tasks (`Task.resume()`); the tasks not
        paused are skipped."""
        paused = queryset.filter(status=Status.READY, not_before=PAUSED)
        self.each_selected(request, paused, "resumed", lambda t: t.resume(), queryset)

    def each_selected(
        self,
        request: HttpRequest,
        queryset: TaskQuerySet,
        verb: str,
        act: Any,
        among: TaskQuerySet | None = None,
    ) -> None:
        """Apply `act(task)` to the selected ready tasks (up to ten pages of them) and report
        how many were `verb` and how many of `among` (default: the selection) skipped."""
        done = 0
        ready = queryset.order_by("pk").filter(status=Status.READY)
        for task in ready.defer("spec", "result", "errors")[: self.list_per_page * 10]:
            try:
                act(task)
            except (InvalidTransition, TaskNotFound):
                continue
            done += 1
        total = (among if among is not None else queryset).order_by().count()
        logger.info("%s %s %d of %d selected tasks", request.user, verb, done, total)
        self.message_user(
            request,
            _("%(done)d %(verb)s, %(skipped)d skipped.")
            % {"done": done, "verb": verb, "skipped": total - done},
            messages.SUCCESS if done else messages.WARNING,
        )

    def order_button(self, task: Task) -> dict[str, Any]:
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

    def release_order_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST: `key_control.release_order(task)`, then back to the task."""
        if request.method != "POST" or not self.has_control_permission(request):
            raise PermissionDenied
        task = Task.objects.filter(pk=pk).first()
        if task is None:
            raise Http404(f"No task has id {pk}.")
        back = reverse("admin:scylla_django_task_change", args=[task.pk])
        try:
            key_control.release_order(task)
        except (InvalidTransition, TaskNotFound) as exc:
            self.message_user(request, f"Not released: {exc}", messages.ERROR)
            return HttpResponseRedirect(back)
        logger.info("%s released the order key %s of %s", request.user, task.order_key, task.rn)
        self.message_user(
            request,
            f"Order key {task.order_key} released: the tasks after {task.rn} may run.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(back)

    def has_queue_permission(self, request: HttpRequest) -> bool:
        """May pause and resume queues: `scylla_django.control_queue`."""
        return request.user.has_perm("scylla_django.control_queue")

    def queue_view(self, request: HttpRequest, queue: str, operation: str) -> HttpResponse:
        """POST: pause or resume `queue`, then back to the dashboard."""
        if request.method != "POST" or not self.has_queue_permission(request):
            raise PermissionDenied
        if operation not in {"pause", "resume"}:
            raise Http404(f"Unknown queue operation {operation!r}.")
        try:
            if operation == "pause":
                QueueSetting.objects.pause(queue)
            else:
                QueueSetting.objects.resume(queue)
        except ValidationError as exc:
            self.message_user(request, " ".join(exc.messages), messages.ERROR)
        else:
            logger.info("%s: %s queue %s", request.user, operation, queue)
            done = (
                _("Queue %(queue)s paused: no task of it is leased.")
                if operation == "pause"
                else _("Queue %(queue)s resumed.")
            )
            self.message_user(request, done % {"queue": queue}, messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:scylla_django_task_dashboard"))

    def page_context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        """The context every admin page needs, plus ours."""
        return {
            **self.admin_site.each_context(request),
            **self.console_links(request),
            "title": title,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            # Django < 6 renders the object-tools block inside the content block, which our
            # pages replace: they then render the tools themselves.
            "scylla_tools_in_content": django.VERSION < (6, 0),
        }
