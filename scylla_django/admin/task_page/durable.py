"""A durable task's record: its steps (name, result size, when, lease), its cursor, its waits and
the signals it received."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ...models import Task
from ...models.waits import durable_record
from ...text import plural


@admin.display(description=gettext_lazy("steps and waits"))
def durable_table(task: Task) -> SafeString | str:
    """The task's steps (name, result size, when, lease), cursor, waits and signals."""
    record = durable_record(task)
    rows = [(_("step"), s.name, plural(s.size, "byte"), s.time, s.lease) for s in record["steps"]]
    rows += [
        (_("wait"), w.name, f"{w.describe()}: {w.outcome or _('waiting')}", w.started, w.lease)
        for w in record["waits"]
    ]
    rows += [(_("signal"), g.name, "", g.time, "") for g in record["signals"]]
    if not rows and record["cursor"] is None:
        return "-"
    cursor = (
        format_html("<p>cursor: <code>{}</code></p>", json.dumps(record["cursor"]))
        if record["cursor"] is not None
        else ""
    )
    return format_html(
        '{}<table class="scylla-durable"><thead><tr><th>{}</th><th>{}</th><th>{}</th>'
        "<th>{}</th><th>{}</th></tr></thead><tbody>{}</tbody></table>",
        cursor,
        _("what"),
        _("name"),
        _("detail"),
        _("time"),
        _("lease"),
        format_html_join(
            "",
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            rows,
        ),
    )
