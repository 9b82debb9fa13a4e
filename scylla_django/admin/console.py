"""The console's own pages beside the task list: what they share (`ConsoleView`, their context
and links), the dashboard, its charts, pausing a queue, and the bulk purge.

Each page is a view class that `TaskAdmin.get_urls()` mounts through the admin site's
`admin_view()`, with the task admin it answers for as `model_admin`.
"""

from __future__ import annotations

import logging
from typing import Any

import django
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import DEFAULT_DB_ALIAS
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views import View

from ..conf import scylla_settings
from ..durations import short
from ..models import QueueSetting, Task
from . import charts, dashboard
from .databases import database_choices, named_database
from .display import tasks
from .purge import PurgeForm, TimedPurge

logger = logging.getLogger("scylla_django")


def console_links(model_admin: Any, request: HttpRequest) -> dict[str, str]:
    """URLs of the dashboard, the keys page and the bulk purge page, for the users who may use
    them."""
    links = {}
    if model_admin.has_view_permission(request):
        links["scylla_dashboard_url"] = reverse("admin:scylla_django_task_dashboard")
        links["scylla_keys_url"] = reverse("admin:scylla_django_task_keys")
    if model_admin.has_purge_permission(request):
        links["scylla_purge_url"] = reverse("admin:scylla_django_task_purge")
    return links


def page_context(model_admin: Any, request: HttpRequest, title: str) -> dict[str, Any]:
    """The context every admin page needs, plus ours."""
    return {
        **model_admin.admin_site.each_context(request),
        **console_links(model_admin, request),
        "title": title,
        "opts": model_admin.opts,
        "app_label": model_admin.opts.app_label,
        # Django < 6 renders the object-tools block inside the content block, which our pages
        # replace: they then render the tools themselves.
        "scylla_tools_in_content": django.VERSION < (6, 0),
    }


class ConsoleView(View):
    """A page of the console, mounted beside the task list: it answers for `model_admin`, the
    `TaskAdmin` that mounts it, whose permissions it asks (`permitted`) before anything else.
    A method the page does not answer is refused as a missing permission is (403)."""

    model_admin: Any = None
    http_method_names = ["get", "head"]

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if not self.permitted(request):
            raise PermissionDenied
        return super().dispatch(request, *args, **kwargs)

    def permitted(self, request: HttpRequest) -> bool:
        """Whether the user may use this page: by default, whether they may view tasks."""
        return bool(self.model_admin.has_view_permission(request))

    def http_method_not_allowed(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        raise PermissionDenied

    def page(self, request: HttpRequest, title: str) -> dict[str, Any]:
        """The context of this page, titled `title`."""
        return page_context(self.model_admin, request, title)

    def say(self, request: HttpRequest, message: str, level: int) -> None:
        """Tell the user `message` on the next page, as the admin does."""
        self.model_admin.message_user(request, message, level)


class DashboardView(ConsoleView):
    """Counts per queue and status, throughput, expired leases, failures and live workers."""

    def get(self, request: HttpRequest) -> HttpResponse:
        refresh = request.GET.get("refresh", "10")
        context = {
            **self.page(request, _("Scylla dashboard")),
            **database_choices(request),
            "dashboard": dashboard.build(named_database(request) or DEFAULT_DB_ALIAS),
            "batches_url": reverse("admin:scylla_django_batch_changelist"),
            "charts": charts.build(request.GET.get("range")),
            "may_control_queues": self.model_admin.has_queue_permission(request),
            "refresh": int(refresh) if refresh in {"0", "5", "10", "30", "60"} else 10,
        }
        return TemplateResponse(request, "scylla_django/admin/dashboard.html", context)


class DashboardChartsView(ConsoleView):
    """The data of the dashboard's per-queue charts, as JSON: `?range=hour|day|week`."""

    def get(self, request: HttpRequest) -> JsonResponse:
        key = request.GET.get("range", charts.DEFAULT_RANGE)
        if key not in charts.RANGES:
            choices = ", ".join(charts.RANGES)
            return JsonResponse(
                {"code": "invalid_range", "detail": f"range is one of {choices}, not {key!r}."},
                status=400,
            )
        return JsonResponse(charts.build(key).as_json())


class QueueControlView(ConsoleView):
    """POST: pause or resume a queue (the dashboard's queue rows), then back to the dashboard."""

    http_method_names = ["post"]

    def permitted(self, request: HttpRequest) -> bool:
        return bool(self.model_admin.has_queue_permission(request))

    def post(self, request: HttpRequest, queue: str, operation: str) -> HttpResponse:
        if operation not in {"pause", "resume"}:
            raise Http404(f"Unknown queue operation {operation!r}.")
        try:
            if operation == "pause":
                QueueSetting.objects.pause(queue)
            else:
                QueueSetting.objects.resume(queue)
        except ValidationError as exc:
            self.say(request, " ".join(exc.messages), messages.ERROR)
        else:
            logger.info("%s: %s queue %s", request.user, operation, queue)
            done = (
                _("Queue %(queue)s paused: no task of it is leased.")
                if operation == "pause"
                else _("Queue %(queue)s resumed.")
            )
            self.say(request, done % {"queue": queue}, messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:scylla_django_task_dashboard"))


class PurgeView(ConsoleView):
    """Bulk purge: choose (GET), see how many tasks match (GET), confirm and purge (POST)."""

    http_method_names = ["get", "head", "post"]

    def permitted(self, request: HttpRequest) -> bool:
        return bool(self.model_admin.has_purge_permission(request))

    def get(self, request: HttpRequest) -> HttpResponse:
        chosen = any(name in request.GET for name in PurgeForm.base_fields)
        form = PurgeForm(request.GET) if chosen else PurgeForm()
        count = None
        if form.is_bound and form.is_valid():
            count = Task.objects.purgeable(**form.selection()).count()
        return self.form_page(request, form, count)

    def post(self, request: HttpRequest) -> HttpResponse:
        form = PurgeForm(request.POST)
        if form.is_valid():
            return self.purge(request, form)
        return self.form_page(request, form, None)

    def form_page(self, request: HttpRequest, form: PurgeForm, count: int | None) -> HttpResponse:
        """The page: the form, and how many tasks it selects once it is valid."""
        context = {
            **self.page(request, _("Bulk purge")),
            "form": form,
            "count": count,
            "chunk_size": scylla_settings.PURGE_CHUNK_SIZE,
        }
        return TemplateResponse(
            request, "scylla_django/admin/purge.html", context, status=400 if form.errors else 200
        )

    def purge(self, request: HttpRequest, form: PurgeForm) -> HttpResponse:
        """Run the confirmed purge in chunks, within the admin's `purge_time_budget`, and
        report."""
        selection = form.selection()
        run = TimedPurge(self.model_admin.purge_time_budget)
        finished = run.run(lambda **kw: Task.objects.purge(**selection, **kw))
        logger.info(
            "%s purged %d tasks in %d chunks (%s)",
            request.user,
            run.deleted,
            run.chunks,
            form.description(),
        )
        remaining = 0 if finished else Task.objects.purgeable(**selection).count()
        if remaining:
            self.say(
                request,
                _(
                    "Purged %(tasks)s in %(seconds)s, then stopped; %(remaining)s more match: "
                    "purge again, or run manage.py scylla_cleanup."
                )
                % {
                    "tasks": tasks(run.deleted),
                    "seconds": short(run.seconds),
                    "remaining": f"{remaining:,}",
                },
                messages.WARNING,
            )
        else:
            self.say(
                request, _("Purged %(tasks)s.") % {"tasks": tasks(run.deleted)}, messages.SUCCESS
            )
        return HttpResponseRedirect(reverse("admin:scylla_django_task_changelist"))
