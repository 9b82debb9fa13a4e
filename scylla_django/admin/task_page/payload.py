"""What a task carries: its spec, its result, its errors and the log of its last run."""

from __future__ import annotations

from django.contrib import admin
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy

from ...models import Task
from ..display import errors_table as errors_html
from ..display import folded, pretty_json, shown_field

spec_json = shown_field("spec_json", "spec", pretty_json)
result_json = shown_field("result_json", "result", pretty_json)
errors_table = shown_field("errors_table", "errors", errors_html)


@admin.display(description=gettext_lazy("log"))
def log_text(task: Task) -> SafeString | str:
    """What the handler logged in the task's last run (docs/howto/task-logs.md)."""
    text = task.read_log()
    return "-" if text is None else folded(text)
