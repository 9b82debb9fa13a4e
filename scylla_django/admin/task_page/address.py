"""Which task a page's address names: its id, as the admin's links write it, or its rn, as people
and the rest of the app write it (redirected to the id's address)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _

from ...models import Task
from ...validation import rn_validator


def task_by_key(key: str) -> Task | None:
    """The task whose id is `key`, else the task whose rn is `key`, else None.

    The payloads are left out: the page loads its task again, whole.
    """
    found = Task.objects.defer("spec", "result", "errors")
    if key.isascii() and key.isdigit() and len(key) <= 18:  # a bigint
        task = found.filter(pk=int(key)).first()
        if task is not None:
            return task
    try:
        rn_validator(key)
    except ValidationError:
        return None
    return found.filter(rn=key).first()


def task_at(
    model_admin: Any, request: HttpRequest, object_id: str, page: str
) -> Task | HttpResponse:
    """The task that the address of a task's `page` names by `object_id`, an id or an rn; or the
    answer instead: a redirect from an rn to the id's address, or a message and the task list
    for an unknown key. A user who may not view tasks is refused first (403)."""
    if not model_admin.has_view_or_change_permission(request):
        raise PermissionDenied
    key = unquote(object_id)
    task = task_by_key(key)
    if task is None:
        model_admin.message_user(
            request,
            _("No task has the id or rn “%(key)s”. Perhaps it was purged?") % {"key": key},
            messages.WARNING,
        )
        return HttpResponseRedirect(reverse("admin:scylla_django_task_changelist"))
    if str(task.pk) != key:
        url = reverse(f"admin:scylla_django_task_{page}", args=[task.pk])
        query = request.GET.urlencode()
        return HttpResponseRedirect(f"{url}?{query}" if query else url)
    return task
