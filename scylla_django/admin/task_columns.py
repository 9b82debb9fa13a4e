"""The task's columns and fields as the list and the page show them: badges, links, times."""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib import admin
from django.contrib.admin import helpers
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import followups
from ..durations import ago as ago_words
from ..durations import short
from ..models import AFTER_PARENTS, PAUSED, Dependency, History, Task, TaskOrigin, task_pauses
from ..models.keys import described
from ..models.waits import durable_record
from ..text import plural
from .display import (
    TaskAdminBase,
    ago,
    changelist_url,
    moment,
    status_badge,
    timestamp,
)
from .schedules import chain as chain_links

HISTORY_LIMIT = 200
PARENTS_LIMIT = 100
CHILDREN_LIMIT = 100


def parent_item(parent: followups.Parent) -> SafeString:
    """A parent of a follow-up: a link to its page and its status; "purged" once it is gone."""
    if parent.status is None:
        return format_html('<li>{} <span class="scylla-age">purged</span></li>', parent.rn)
    url = reverse("admin:scylla_django_task_change", args=[parent.id])
    return format_html(
        '<li><a href="{}">{}</a> {}</li>', url, parent.rn, status_badge(parent.status)
    )


class TaskColumns(TaskAdminBase):
    """The task's columns and fields as the list and the page show them: badges, links, times. A
    part of `TaskAdmin`."""

    def action_checkbox(self, obj: Task) -> SafeString:
        """Django's selection checkbox, written out directly: rendering its widget's template
        on each of the list's rows took a fifth of the page's time."""
        label = format_html(_("Select this object for an action - {}"), str(obj))
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            helpers.ACTION_CHECKBOX_NAME,
            obj.pk,
            label,
        )

    @admin.display(description=gettext_lazy("queue"))
    def queue_link(self, task: Task) -> SafeString:
        return format_html('<a href="{}">{}</a>', changelist_url(queue=task.queue), task.queue)

    @admin.display(description=gettext_lazy("status"))
    def status_badge(self, task: Task) -> SafeString:
        if followups.waits_for_parents(task):
            return format_html(
                '{} <span class="scylla-age">waiting for parents</span>', status_badge(task.status)
            )
        return status_badge(task.status)

    @admin.display(description=gettext_lazy("batch"))
    def batch_link(self, task: Task) -> SafeString | str:
        if task.batch_id is None:
            return "-"
        url = reverse("admin:scylla_django_batch_change", args=[task.batch_id])
        return format_html('<a href="{}">batch {}</a>', url, task.batch_id)

    @admin.display(description=gettext_lazy("dead letter since"))
    def dead_at(self, task: Task) -> SafeString | str:
        return "-" if task.dead is None else moment(task.dead)

    @admin.display(description=gettext_lazy("progress"))
    def progress_bar(self, task: Task) -> SafeString:
        return format_html(
            '<progress class="scylla-progress" value="{}" max="1">{}%</progress> '
            '<span class="scylla-age">{}%</span>',
            f"{task.progress:.3f}",
            round(task.progress * 100),
            round(task.progress * 100),
        )

    @admin.display(description=gettext_lazy("attempts in the chain"))
    def chain(self, task: Task) -> SafeString | str:
        return chain_links(task)

    @admin.display(description=gettext_lazy("unique key"))
    def unique_key_link(self, task: Task) -> SafeString | str:
        if task.unique_key is None:
            return "-"
        held = "held" if task.unique_held or not task.is_terminal else "free"
        return format_html(
            '<a href="{}"><code>{}</code></a> ({})',
            changelist_url(unique_key=task.unique_key),
            task.unique_key,
            held,
        )

    @admin.display(description=gettext_lazy("keys"))
    def keys_list(self, task: Task) -> SafeString | str:
        """The locks, limits, order key and rate the task names, each a link to the tasks that
        name it."""
        parts = described(task)
        items = [(f"lock ({mode})", name) for name, mode in parts["locks"]] + [
            ("limit", name) for name in parts["limits"]
        ]
        if parts["order_key"] is not None:
            items.append(
                (f"order key (on failure: {parts['order_on_failure']})", parts["order_key"])
            )
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

    @admin.display(description=gettext_lazy("waiting"))
    def waiting_line(self, task: Task) -> SafeString | str:
        """Why a ready task is not running now (`Task.waiting_reasons`), one reason a line."""
        reasons = task.waiting_reasons()
        if not reasons:
            return "-" if task.status != "ready" else "nothing: it may run now"
        return format_html(
            '<ul class="scylla-waiting">{}</ul>',
            format_html_join("", "<li>{}</li>", ((reason["detail"],) for reason in reasons)),
        )

    @admin.display(description=gettext_lazy("submitted by"))
    def submitter_text(self, task: Task) -> str:
        """Who submitted the task: a user (and the API token used), or the system."""
        origin = TaskOrigin.objects.filter(task=task).select_related("user").first()
        if origin is None or origin.kind == "system":
            return (origin.name if origin and origin.name else "") or _("the system")
        who = origin.user.get_username() if origin.user is not None else origin.kind
        if origin.name and origin.name != who:
            who = f"{origin.name} ({who})"
        if origin.token:
            who += " " + _("with API token %(token)s…") % {"token": origin.token[:8]}
        return who + (f": {origin.description}" if origin.description else "")

    @admin.display(description=gettext_lazy("starts"))
    def starts_line(self, task: Task) -> str:
        """When a ready task is expected to start, and the rule that decides it
        (`Task.forecast`)."""
        if task.status != "ready":
            return "-"
        forecast = task.forecast()
        if forecast.starts_at is None:
            return _("unknown: %(why)s") % {"why": forecast.detail}
        if not forecast.wait:
            return _("may start now")
        return f"{forecast.starts_at:%Y-%m-%d %H:%M:%S} UTC ({forecast.detail})"

    @admin.display(description=gettext_lazy("steps and waits"))
    def durable_table(self, task: Task) -> SafeString | str:
        """The task's steps (name, result size, when, lease), cursor, waits and signals."""
        record = durable_record(task)
        rows = [
            (_("step"), s.name, plural(s.size, "byte"), s.time, s.lease) for s in record["steps"]
        ]
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

    @admin.display(description=gettext_lazy("unique window"))
    def unique_window_text(self, task: Task) -> str:
        return "-" if task.unique_window is None else short(task.unique_window)

    @admin.display(description=gettext_lazy("CPU time"))
    def cpu_time_text(self, task: Task) -> str:
        if task.cpu_time is None:
            return "-"
        if task.cpu_time < 0.001:
            return _("under 1 ms")
        return short(timedelta(seconds=task.cpu_time))

    @admin.display(description=gettext_lazy("peak memory"))
    def peak_memory_text(self, task: Task) -> str:
        return "-" if task.peak_memory is None else filesizeformat(task.peak_memory)

    @admin.display(description=gettext_lazy("owner"))
    def owner_link(self, task: Task) -> SafeString | str:
        if not task.owner:
            return "-"
        return format_html('<a href="{}">{}</a>', changelist_url(owner=task.owner), task.owner)

    @admin.display(description=gettext_lazy("error"))
    def error_code(self, task: Task) -> SafeString | str:
        code = getattr(task, "error_code", None)
        if not code:
            return "-"
        return format_html(
            '<a href="{}"><code>{}</code></a>', changelist_url(error_code=code), code
        )

    @admin.display(description=gettext_lazy("deadline"))
    def deadline_at(self, task: Task) -> SafeString | str:
        if task.is_expired and task.deadline is not None:
            return format_html(
                '<span class="scylla-badge scylla-expired" title="{}, {}">expired</span>',
                timestamp(task.deadline),
                ago_words(task.deadline),
            )
        return ago(task.deadline)

    @admin.display(description=gettext_lazy("deadline"))
    def deadline_time(self, task: Task) -> SafeString | str:
        if task.is_expired:
            return format_html(
                '{} <span class="scylla-badge scylla-expired">expired</span>', moment(task.deadline)
            )
        return moment(task.deadline)

    @admin.display(description=gettext_lazy("not before"))
    def not_before_at(self, task: Task) -> SafeString | str:
        """The delayed start; a follow-up's is its own, taken once its parents completed."""
        if task.not_before == PAUSED:
            kept = task_pauses.pause_of(task)
            own = kept.not_before if kept is not None else None
            return format_html("paused, then {}", moment(own)) if own else "paused"
        if task.not_before != AFTER_PARENTS:
            return moment(task.not_before)
        own = followups.own_not_before([task])[task.pk]
        if not followups.waits_for_parents(task):
            return moment(own)
        if own is None:
            return "waiting for parents"
        return format_html("waiting for parents, then {}", moment(own))

    @admin.display(description=gettext_lazy("waits for"))
    def parents_list(self, task: Task) -> SafeString | str:
        """The parents of a waiting follow-up, each linked, with its status."""
        shown = followups.parents(task, limit=PARENTS_LIMIT + 1)
        if not shown:
            return "-"
        items = format_html_join("", "{}", ((parent_item(p),) for p in shown[:PARENTS_LIMIT]))
        more = ""
        if len(shown) > PARENTS_LIMIT:
            total = Dependency.objects.filter(child_id=task.pk).count()
            more = f"and {total - PARENTS_LIMIT:,} more"
        return format_html('<ul class="scylla-parents">{}</ul>{}', items, more)

    @admin.display(description=gettext_lazy("parent"))
    def parent_link(self, task: Task) -> SafeString | str:
        """The task that spawned this one, linked (its rn only, once purged)."""
        if task.parent is None:
            return "-"
        found = Task.objects.filter(rn=task.parent).values_list("pk", "status").first()
        if found is None:
            return format_html('{} <span class="scylla-age">{}</span>', task.parent, _("purged"))
        url = reverse("admin:scylla_django_task_change", args=[found[0]])
        return format_html('<a href="{}">{}</a> {}', url, task.parent, status_badge(found[1]))

    @admin.display(description=gettext_lazy("children"))
    def children_list(self, task: Task) -> SafeString | str:
        """The tasks this one spawned, oldest first, each linked with its status; the rest
        through the task list filtered by parent."""
        shown = list(
            Task.objects.filter(parent=task.rn)
            .order_by("id")
            .values_list("pk", "rn", "status")[: CHILDREN_LIMIT + 1]
        )
        if not shown:
            return "-"
        items = format_html_join(
            "",
            '<li><a href="{}">{}</a> {}</li>',
            (
                (reverse("admin:scylla_django_task_change", args=[pk]), rn, status_badge(status))
                for pk, rn, status in shown[:CHILDREN_LIMIT]
            ),
        )
        every = format_html(
            '<a href="{}">{}</a>', changelist_url(parent=task.rn), _("all children")
        )
        if len(shown) > CHILDREN_LIMIT:
            every = format_html(
                '{} <a href="{}">{}</a>',
                _("and more:"),
                changelist_url(parent=task.rn),
                _("all children"),
            )
        return format_html('<ul class="scylla-children">{}</ul>{}', items, every)

    @admin.display(description=gettext_lazy("expires"))
    def expires_time(self, task: Task) -> SafeString | str:
        return moment(task.expires_at)

    @admin.display(description=gettext_lazy("history"))
    def history_note(self, task: Task) -> str:
        count = History.objects.filter(task=task).count()
        if not count:
            return _("No events yet: the task was never leased.")
        if count > HISTORY_LIMIT:
            return f"{count:,} events; the latest {HISTORY_LIMIT} are shown below."
        return f"{plural(count, 'event')}, shown below."
