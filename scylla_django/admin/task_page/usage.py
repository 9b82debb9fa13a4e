"""What a task's last run used: its CPU time and its peak memory."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin
from django.template.defaultfilters import filesizeformat
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ...durations import short
from ...models import Task


@admin.display(description=gettext_lazy("CPU time"))
def cpu_time_text(task: Task) -> str:
    if task.cpu_time is None:
        return "-"
    if task.cpu_time < 0.001:
        return _("under 1 ms")
    return short(timedelta(seconds=task.cpu_time))


@admin.display(description=gettext_lazy("peak memory"))
def peak_memory_text(task: Task) -> str:
    return "-" if task.peak_memory is None else filesizeformat(task.peak_memory)
