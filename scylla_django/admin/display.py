"""What the task and worker pages share: HTML helpers (times, badges, JSON, errors, links) and
`ReadOnly`."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from ..durations import ago as ago_words
from ..text import plural

CSS = "scylla_django/admin.css"
PAYLOAD_PREVIEW = 10_000  # characters of pretty-printed JSON shown before "show all"


class ReadOnly:
    """A model admin or inline that adds, changes and deletes nothing: rows change only through
    its actions, each calling the model's own method."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def tasks(count: int) -> str:
    """`count` tasks, in words: "1 task", "1,200 tasks"."""
    return plural(count, "task")


def timestamp(value: datetime) -> str:
    """`value` in the current time zone, to the second, with the zone's name."""
    return f"{timezone.localtime(value):%Y-%m-%d %H:%M:%S %Z}"


def _time(value: datetime | None, html: str) -> SafeString | str:
    """`value` as `html`, filled with its ISO form, its `timestamp()` and its age; "-" if None."""
    if value is None:
        return "-"
    return format_html(html, value.isoformat(), timestamp(value), ago_words(value))


def moment(value: datetime | None) -> SafeString | str:
    """A timestamp with its age: "2026-11-22 14:02:11 UTC (3 min ago)"."""
    return _time(value, '<time datetime="{}">{}</time> <span class="scylla-age">({})</span>')


def ago(value: datetime | None) -> SafeString | str:
    """An age for a list cell, "3 min ago", with the timestamp as its tooltip."""
    return _time(value, '<time datetime="{}" title="{}">{}</time>')


def field_display(
    field: str,
    show: Callable[[Any], SafeString | str],
    description: str | None = None,
    ordering: str | None = None,
) -> Callable[[Any, Any], SafeString | str]:
    """A read-only column or field of a model admin: `show(obj.<field>)`, titled `description`
    (by default the field's name, with spaces), sortable by `ordering` if given."""

    @admin.display(description=description or field.replace("_", " "), ordering=ordering)
    def display(model_admin: Any, obj: Any) -> SafeString | str:
        return show(getattr(obj, field))

    return display


def shown_field(
    name: str,
    field: str,
    show: Callable[[Any], SafeString | str],
    description: str | None = None,
    ordering: str | None = None,
) -> Callable[[Any], SafeString | str]:
    """A column or read-only field named `name`, as a function of the row: `show(obj.<field>)`,
    titled `description` (by default the field's name, with spaces), sortable by `ordering` if
    given. The admin names its column and field after the function (`field-<name>`)."""

    @admin.display(description=description or field.replace("_", " "), ordering=ordering)
    def display(obj: Any) -> SafeString | str:
        return show(getattr(obj, field))

    display.__name__ = display.__qualname__ = name
    return display


def status_badge(status: str) -> SafeString:
    """A status as a coloured badge (the colours are in admin.css, for light and dark mode)."""
    return format_html('<span class="scylla-badge scylla-{}">{}</span>', status, status)


def pretty_json(value: Any) -> SafeString | str:
    """JSON indented in a <pre>; past `PAYLOAD_PREVIEW` characters the rest folds away."""
    if value is None:
        return "-"
    return folded(json.dumps(value, indent=2, ensure_ascii=False))


def folded(text: str) -> SafeString:
    """Text in a <pre>; past `PAYLOAD_PREVIEW` characters the rest folds away."""
    if len(text) <= PAYLOAD_PREVIEW:
        return format_html('<pre class="scylla-json">{}</pre>', text)
    cut = text.rfind("\n", 0, PAYLOAD_PREVIEW)
    cut = cut if cut > 0 else PAYLOAD_PREVIEW
    head, rest = text[:cut], text[cut:].removeprefix("\n")
    return format_html(
        '<pre class="scylla-json">{}</pre><details class="scylla-more"><summary>'
        "Show all: {} more of {}</summary>"
        '<pre class="scylla-json">{}</pre></details>',
        head,
        filesizeformat(len(rest.encode())),
        filesizeformat(len(text.encode())),
        rest,
    )


def error_args(args: Any) -> SafeString | str:
    """An error's args whole, folded when long; a traceback among them is shown as its lines."""
    trace = args.get("traceback") if isinstance(args, dict) else None
    if not isinstance(trace, str) or "\n" not in trace:
        return pretty_json(args)
    rest = pretty_json({key: value for key, value in args.items() if key != "traceback"})
    return format_html('{}<div class="scylla-traceback">{}</div>', rest, folded(trace))


def errors_table(errors: Any) -> SafeString | str:
    """A task's errors as a table of code, description and args."""
    if not errors:
        return "-"
    if not (isinstance(errors, list) and all(isinstance(e, dict) for e in errors)):
        return pretty_json(errors)
    rows = format_html_join(
        "",
        "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
        (
            (
                error.get("code", ""),
                error.get("description", ""),
                error_args(error.get("args", {})),
            )
            for error in errors
        ),
    )
    return format_html(
        '<table class="scylla-errors"><thead><tr><th>code</th><th>description</th>'
        "<th>args</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )


def can_view_tasks(request: HttpRequest) -> bool:
    """Whether the user may view tasks (view or change permission, as Django's admin has it)."""
    return request.user.has_perm("scylla_django.view_task") or request.user.has_perm(
        "scylla_django.change_task"
    )


def changelist_url(**params: str) -> str:
    """The task list, filtered by `params` (e.g. queue="q3", status="ready")."""
    return f"{reverse('admin:scylla_django_task_changelist')}?{urlencode(params)}"
