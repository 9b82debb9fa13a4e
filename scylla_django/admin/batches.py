"""The batches' pages: the list with each batch's progress (read from its counters), and a
batch's page with its callbacks and links to its tasks; "Cancel selected batches"."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..batches import cancel_batch
from ..enums import Status
from ..exceptions import InvalidTransition
from ..models import CALLBACKS, Batch, Task
from .databases import DatabasePages
from .display import CSS, ReadOnly, changelist_url, moment, status_badge

logger = logging.getLogger("scylla_django")

if TYPE_CHECKING:  # django-stubs makes this generic; Django's class cannot be subscripted
    BatchAdminBase = admin.ModelAdmin[Batch]
else:
    BatchAdminBase = admin.ModelAdmin

#: Batch states as the task badges colour them.
STATE_BADGES = {
    "running": Status.RUNNING,
    "completed": Status.COMPLETED,
    "failed": Status.ABORTED,
    "cancelled": Status.CANCELLED,
}


class OpenFilter(admin.SimpleListFilter):
    """`?open=yes`: batches with a callback not yet released or cancelled (their index)."""

    title = "open"
    parameter_name = "open"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Open"), ("no", "Closed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(closed__isnull=True)
        if self.value() == "no":
            return queryset.filter(closed__isnull=False)
        return queryset


@admin.register(Batch)
class BatchAdmin(DatabasePages, ReadOnly, BatchAdminBase):
    """Batches: progress at a glance, and cancel. Every figure is read from the batch's own
    counters, never by counting its tasks."""

    list_display = (
        "id",
        "state_badge",
        "progress_bar",
        "total",
        "completed",
        "failed",
        "created_at",
        "callback_links",
    )
    list_filter = (OpenFilter,)
    ordering = ("-id",)
    list_per_page = 100
    show_full_result_count = False
    actions = ("cancel_selected",)
    fields = (
        ("state_badge", "progress_bar"),
        ("total", "completed", "failed"),
        ("created_at", "cancelled_at", "closed_at"),
        "callback_links",
        "task_links",
    )
    readonly_fields = (
        "state_badge",
        "progress_bar",
        "total",
        "completed",
        "failed",
        "created_at",
        "cancelled_at",
        "closed_at",
        "callback_links",
        "task_links",
    )

    class Media:
        css = {"all": (CSS,)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Batch]:
        return (
            super().get_queryset(request).select_related("on_success", "on_complete", "on_failure")
        )

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """May cancel a batch (and so its tasks): `scylla_django.cancel_task`."""
        return request.user.has_perm("scylla_django.cancel_task")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("scylla_django.view_task") or super().has_view_permission(
            request, obj
        )

    @admin.display(description="state")
    def state_badge(self, batch: Batch) -> SafeString:
        return format_html(
            '<span class="scylla-badge scylla-{}" data-state="{}">{}</span>',
            STATE_BADGES[batch.state],
            batch.state,
            batch.state,
        )

    @admin.display(description="done")
    def progress_bar(self, batch: Batch) -> SafeString:
        share = batch.done / batch.total if batch.total else 1.0
        return format_html(
            '<progress class="scylla-progress" value="{}" max="1"></progress> '
            '<span class="scylla-age scylla-batch-done">{} / {}</span>',
            f"{share:.3f}",
            batch.done,
            batch.total,
        )

    @admin.display(description="created", ordering="id")
    def created_at(self, batch: Batch) -> SafeString | str:
        return moment(batch.created)

    @admin.display(description="cancelled")
    def cancelled_at(self, batch: Batch) -> SafeString | str:
        return "-" if batch.cancelled is None else moment(batch.cancelled)

    @admin.display(description="closed (every callback released or cancelled)")
    def closed_at(self, batch: Batch) -> SafeString | str:
        return "-" if batch.closed is None else moment(batch.closed)

    @admin.display(description="callbacks")
    def callback_links(self, batch: Batch) -> SafeString | str:
        rows = []
        for kind in CALLBACKS:
            task: Task | None = getattr(batch, kind)
            if task is None:
                continue
            held = task.status == Status.READY and task.not_before is not None
            rows.append(
                (
                    kind,
                    reverse("admin:scylla_django_task_change", args=[task.pk]),
                    task.queue,
                    status_badge(task.status),
                    " (held)" if held else "",
                )
            )
        if not rows:
            return "-"
        return format_html_join(
            "",
            '<div class="scylla-callback">{}: <a href="{}">{}</a> {}{}</div>',
            rows,
        )

    @admin.display(description="tasks")
    def task_links(self, batch: Batch) -> SafeString:
        batch_id = str(batch.pk)
        return format_html(
            '<a href="{}">All tasks</a> · <a href="{}">failed</a> · <a href="{}">dead letters</a>',
            changelist_url(batch=batch_id),
            changelist_url(batch=batch_id, status="aborted"),
            changelist_url(batch=batch_id, dead="yes"),
        )

    @admin.action(permissions=["cancel"], description="Cancel selected batches")
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        """Cancel each selected batch (`batches.cancel_batch`): its ready and running tasks and
        its callbacks not yet released. A batch cancelled already is skipped."""
        batches = tasks = skipped = 0
        for batch in queryset.order_by("pk"):
            try:
                tasks += cancel_batch(batch)
            except InvalidTransition:
                skipped += 1
                continue
            batches += 1
        logger.info("%s cancelled %d batches (%d tasks)", request.user, batches, tasks)
        self.message_user(
            request,
            f"{batches} batches cancelled ({tasks} tasks), {skipped} skipped (cancelled already).",
            messages.SUCCESS if batches else messages.WARNING,
        )
