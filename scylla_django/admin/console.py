"""The console's own pages beside the task list: the dashboard, its charts and the bulk purge."""

from __future__ import annotations

import logging

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import DEFAULT_DB_ALIAS
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _

from ..conf import scylla_settings
from ..durations import short
from ..models import Task
from . import charts, dashboard
from .databases import database_choices, named_database
from .display import (
    tasks,
)
from .purge import PurgeForm, TimedPurge
from .task_operations import TaskOperations

logger = logging.getLogger("scylla_django")


class ConsolePages(TaskOperations):
    """The console's own pages beside the task list: the dashboard, its charts and the bulk purge.
    A part of `TaskAdmin`."""

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """Counts per queue and status, throughput, expired leases, failures and live workers."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        refresh = request.GET.get("refresh", "10")
        context = {
            **self.page_context(request, _("Scylla dashboard")),
            **database_choices(request),
            "dashboard": dashboard.build(named_database(request) or DEFAULT_DB_ALIAS),
            "batches_url": reverse("admin:scylla_django_batch_changelist"),
            "charts": charts.build(request.GET.get("range")),
            "may_control_queues": self.has_queue_permission(request),
            "refresh": int(refresh) if refresh in {"0", "5", "10", "30", "60"} else 10,
        }
        return TemplateResponse(request, "scylla_django/admin/dashboard.html", context)

    def dashboard_charts_view(self, request: HttpRequest) -> JsonResponse:
        """The data of the dashboard's per-queue charts, as JSON: `?range=hour|day|week`."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        key = request.GET.get("range", charts.DEFAULT_RANGE)
        if key not in charts.RANGES:
            choices = ", ".join(charts.RANGES)
            return JsonResponse(
                {"code": "invalid_range", "detail": f"range is one of {choices}, not {key!r}."},
                status=400,
            )
        return JsonResponse(charts.build(key).as_json())

    def purge_view(self, request: HttpRequest) -> HttpResponse:
        """Bulk purge: choose (GET), see how many tasks match (GET), confirm and purge (POST)."""
        if not self.has_purge_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            form = PurgeForm(request.POST)
            if form.is_valid():
                return self.purge(request, form)
        elif any(name in request.GET for name in PurgeForm.base_fields):
            form = PurgeForm(request.GET)
        else:
            form = PurgeForm()
        count = None
        if request.method == "GET" and form.is_bound and form.is_valid():
            count = Task.objects.purgeable(**form.selection()).count()
        context = {
            **self.page_context(request, _("Bulk purge")),
            "form": form,
            "count": count,
            "chunk_size": scylla_settings.PURGE_CHUNK_SIZE,
        }
        return TemplateResponse(
            request, "scylla_django/admin/purge.html", context, status=400 if form.errors else 200
        )

    def purge(self, request: HttpRequest, form: PurgeForm) -> HttpResponse:
        """Run the confirmed purge in chunks, within `purge_time_budget`, and report."""
        selection = form.selection()
        run = TimedPurge(self.purge_time_budget)
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
            self.message_user(
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
            self.message_user(
                request, _("Purged %(tasks)s.") % {"tasks": tasks(run.deleted)}, messages.SUCCESS
            )
        return HttpResponseRedirect(reverse("admin:scylla_django_task_changelist"))
