"""The keys a task names: its locks, limits, order key and rate, and its unique key; each a link
to the tasks that name it."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy

from ...durations import short
from ...models import Task
from ...models.keys import described
from ..display import changelist_url


@admin.display(description=gettext_lazy("keys"))
def keys_list(task: Task) -> SafeString | str:
    """The locks, limits, order key and rate the task names, each a link to the tasks that name
    it."""
    parts = described(task)
    items = [(f"lock ({mode})", name) for name, mode in parts["locks"]] + [
        ("limit", name) for name in parts["limits"]
    ]
    if parts["order_key"] is not None:
        items.append((f"order key (on failure: {parts['order_on_failure']})", parts["order_key"]))
    if parts["rate_key"] is not None:
        items.append(("rate", parts["rate_key"]))
    if not items:
        return "-"
    return format_html(
        '<ul class="scylla-keys">{}</ul>',
        format_html_join(
            "",
            '<li>{} <a href="{}"><code>{}</code></a></li>',
            ((kind, changelist_url(key=name), name) for kind, name in items),
        ),
    )


@admin.display(description=gettext_lazy("unique key"))
def unique_key_link(task: Task) -> SafeString | str:
    if task.unique_key is None:
        return "-"
    held = "held" if task.unique_held or not task.is_terminal else "free"
    return format_html(
        '<a href="{}"><code>{}</code></a> ({})',
        changelist_url(unique_key=task.unique_key),
        task.unique_key,
        held,
    )


@admin.display(description=gettext_lazy("unique window"))
def unique_window_text(task: Task) -> str:
    return "-" if task.unique_window is None else short(task.unique_window)
