"""The task list's actions on the selected tasks: cancel, retry, purge, pause and resume, release
order keys, discard dead letters. Each is a function of the task admin, the request and the
selection, as Django's admin calls actions; `TaskAdmin.actions` names them, and the permission
each needs (`permissions=[…]`) is one of `TaskAdmin`'s `has_<name>_permission`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..conf import scylla_settings
from ..durations import short
from ..enums import TERMINAL_STATUSES, Status
from ..exceptions import InvalidTransition, TaskNotFound
from ..models import PAUSED, Task, TaskQuerySet, key_control
from .console import page_context
from .purge import TimedPurge
from .schedules import retry_selected as retry_tasks

logger = logging.getLogger("scylla_django")


@admin.action(
    permissions=["cancel_own"],
    description=gettext_lazy("Cancel selected (ready/running only)"),
)
def cancel_selected(model_admin: Any, request: HttpRequest, queryset: TaskQuerySet) -> None:
    """Cancel the selected ready and running tasks with `TaskQuerySet.cancel()`; a user with
    `cancel_own_task` only cancels the ones they submitted (the others are skipped)."""
    selected = queryset.order_by()
    total = selected.count()
    if not model_admin.has_cancel_permission(request):
        selected = selected.filter(origin__user=request.user.pk)
    cancelled = selected.cancel()
    logger.info("%s cancelled %d of %d selected tasks", request.user, cancelled, total)
    model_admin.message_user(
        request,
        _("%(cancelled)d cancelled, %(skipped)d skipped (not ready or running).")
        % {"cancelled": cancelled, "skipped": total - cancelled},
        messages.SUCCESS if cancelled else messages.WARNING,
    )


@admin.action(
    permissions=["submit"], description=gettext_lazy("Retry selected (aborted/cancelled only)")
)
def retry_selected(model_admin: Any, request: HttpRequest, queryset: TaskQuerySet) -> None:
    """Resubmit the selected aborted and cancelled tasks with `Task.retry()`."""
    retry_tasks(model_admin, request, queryset)


@admin.action(permissions=["cancel"], description=gettext_lazy("Discard selected dead letters"))
def discard_selected(model_admin: Any, request: HttpRequest, queryset: TaskQuerySet) -> None:
    """Let the selected dead letters go (`TaskQuerySet.discard()`): they stay aborted and are
    purged after the retention. To run one again, retry it instead."""
    total = queryset.count()
    discarded = queryset.discard()
    logger.info("%s discarded %d of %d selected tasks", request.user, discarded, total)
    model_admin.message_user(
        request,
        _("%(discarded)d discarded, %(skipped)d skipped (not dead letters).")
        % {"discarded": discarded, "skipped": total - discarded},
        messages.SUCCESS if discarded else messages.WARNING,
    )


@admin.action(permissions=["purge"], description=gettext_lazy("Purge selected (terminal only)"))
def purge_selected(
    model_admin: Any, request: HttpRequest, queryset: TaskQuerySet
) -> TemplateResponse | None:
    """Delete the selected terminal tasks, with their History, by `TaskQuerySet.purge()`.

    As Django's own delete action does, it first shows how many tasks would go and asks for a
    confirmation, which posts the same selection back with `post=yes`.
    """
    selected = queryset.order_by()
    total = selected.count()
    if request.POST.get("post") != "yes":
        return purge_confirmation(model_admin, request, selected, total)
    run = TimedPurge(model_admin.purge_time_budget)
    # Whatever their age, dead letters too: the selection, not the retention, says what goes.
    finished = run.run(lambda **kw: selected.purge(older_than=timedelta(0), dead=True, **kw))
    logger.info("%s purged %d of %d selected tasks", request.user, run.deleted, total)
    if finished:
        model_admin.message_user(
            request,
            _("%(purged)d purged, %(skipped)d skipped (not terminal).")
            % {"purged": run.deleted, "skipped": total - run.deleted},
            messages.SUCCESS if run.deleted else messages.WARNING,
        )
    else:
        model_admin.message_user(
            request,
            _(
                "%(purged)d purged, then stopped after %(seconds)s: run the action again "
                "for the rest."
            )
            % {"purged": run.deleted, "seconds": short(run.seconds)},
            messages.WARNING,
        )
    return None


def purge_confirmation(
    model_admin: Any, request: HttpRequest, selected: TaskQuerySet, total: int
) -> TemplateResponse:
    """The page that counts what "Purge selected" would delete, and asks to go on."""
    count = selected.filter(status__in=[s.value for s in TERMINAL_STATUSES]).count()
    context = {
        **page_context(model_admin, request, _("Purge selected tasks")),
        "count": count,
        "skipped": total - count,
        "chunk_size": scylla_settings.PURGE_CHUNK_SIZE,
        "selected": request.POST.getlist(ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across") == "1",
        "action_checkbox_name": ACTION_CHECKBOX_NAME,
        "back_url": request.get_full_path(),
    }
    return TemplateResponse(request, "scylla_django/admin/purge_selected.html", context)


@admin.action(
    permissions=["control"],
    description="Release order key (aborted for good, order_on_failure=block)",
)
def release_order_selected(model_admin: Any, request: HttpRequest, queryset: TaskQuerySet) -> None:
    """Let the later tasks of each selected task's order key run (`release_order`): one
    conditional write each; the tasks that hold no order key are skipped."""
    held = queryset.order_by("pk").filter(status=Status.ABORTED, order_block=True)
    released = 0
    for task in held.defer("spec", "result", "errors")[: model_admin.list_per_page * 10]:
        try:
            key_control.release_order(task)
        except (InvalidTransition, TaskNotFound):
            continue
        released += 1
    total = queryset.order_by().count()
    logger.info("%s released the order keys of %d tasks", request.user, released)
    model_admin.message_user(
        request,
        f"{released} order keys released, {total - released} skipped (holding none).",
        messages.SUCCESS if released else messages.WARNING,
    )


@admin.action(permissions=["control"], description=gettext_lazy("Pause selected (ready only)"))
def pause_selected(model_admin: Any, request: HttpRequest, queryset: TaskQuerySet) -> None:
    """Keep the selected ready tasks from every lease (`Task.pause()`), one fenced transaction
    each; the others (not ready, paused already, waiting for parents) are skipped."""
    each_selected(model_admin, request, queryset, "paused", lambda t: t.pause(by=str(request.user)))


@admin.action(permissions=["control"], description=gettext_lazy("Resume selected paused tasks"))
def resume_selected(model_admin: Any, request: HttpRequest, queryset: TaskQuerySet) -> None:
    """End the pause of the selected paused tasks (`Task.resume()`); the tasks not paused
    are skipped."""
    paused = queryset.filter(status=Status.READY, not_before=PAUSED)
    each_selected(model_admin, request, paused, "resumed", lambda t: t.resume(), queryset)


def each_selected(
    model_admin: Any,
    request: HttpRequest,
    queryset: TaskQuerySet,
    verb: str,
    act: Callable[[Task], Any],
    among: TaskQuerySet | None = None,
) -> None:
    """Apply `act(task)` to the selected ready tasks (up to ten pages of them) and report how
    many were `verb` and how many of `among` (default: the selection) skipped."""
    done = 0
    ready = queryset.order_by("pk").filter(status=Status.READY)
    for task in ready.defer("spec", "result", "errors")[: model_admin.list_per_page * 10]:
        try:
            act(task)
        except (InvalidTransition, TaskNotFound):
            continue
        done += 1
    total = (among if among is not None else queryset).order_by().count()
    logger.info("%s %s %d of %d selected tasks", request.user, verb, done, total)
    model_admin.message_user(
        request,
        _("%(done)d %(verb)s, %(skipped)d skipped.")
        % {"done": done, "verb": verb, "skipped": total - done},
        messages.SUCCESS if done else messages.WARNING,
    )


ACTIONS: Any = (
    cancel_selected,
    purge_selected,
    retry_selected,
    release_order_selected,
    pause_selected,
    resume_selected,
    discard_selected,
)
"""The list's actions, in the order its menu shows them (django-stubs types `actions` as
taking any queryset of tasks, hence `Any`)."""
