"""The admin of recurring schedules, and the retry parts of the task admin.

- `ScheduleAdmin` (registered on import): schedules with their next run and last task (linked,
  with its status) and the firing that waits for the run constraints; enable, disable and "Run
  now" actions; create and edit with the same validation as settings and the API. A schedule's
  page says which run constraint is unmet now ("why didn't it fire?") and lists its next runs
  (DST gaps and repeated hours marked, windows applied); for a trigger, what is unmet and its
  latest firings with the events they consumed. Schedules from `SCYLLA["SCHEDULES"]` can only be
  enabled or disabled here.
- `retry_selected`: a task admin action that resubmits the selected aborted and cancelled tasks
  with `Task.retry()`; add it to the task admin's `actions` (it needs `submit_task`).
- `chain`: the previous and next attempts of a task, as links; add it to the task admin's
  `readonly_fields`/`fields`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import db, schedules
from ..durations import short
from ..enums import Status
from ..exceptions import DuplicateTask, InvalidTransition
from ..models import Schedule, Task, WaitingRun
from ..schedules import calendars, constraints, firings, triggers
from .databases import DatabasePages

if TYPE_CHECKING:  # django-stubs makes these generic; Django's classes cannot be subscripted
    ScheduleFormBase = forms.ModelForm[Schedule]
    ScheduleAdminBase = admin.ModelAdmin[Schedule]
else:
    ScheduleFormBase = forms.ModelForm
    ScheduleAdminBase = admin.ModelAdmin


def task_link(rn: str, label: str | None = None) -> SafeString:
    """A link to the admin page of the task with this rn (by rn: it may have been purged)."""
    url = reverse("admin:scylla_django_task_changelist") + f"?q={rn}"
    return format_html('<a href="{}">{}</a>', url, label or rn)


class ScheduleForm(ScheduleFormBase):
    """Validates a schedule as settings and the API do (`schedules.clean_definition`)."""

    every = forms.CharField(
        required=False, help_text='An interval such as "30s", "5m", "2h", "1d" (or use cron).'
    )
    window = forms.CharField(
        required=False,
        help_text='Time ranges in the schedule\'s time zone, comma-separated: "01:00-03:00", '
        '"22:00-02:00, 12:00-12:30". Empty: any time.',
    )
    min_gap = forms.CharField(
        required=False, help_text='Since the last run ended, such as "30m", "20h".'
    )
    wait_timeout = forms.CharField(
        required=False, help_text='Longest wait of a firing, such as "2h" (empty: no limit).'
    )

    class Meta:
        model = Schedule
        fields = ["name", *schedules.DEFINITION_KEYS]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        every = self.instance.every if self.instance.pk else None
        if every is not None:
            # Exact (to the microsecond a timedelta holds): the form saves what it shows.
            self.initial["every"] = seconds_text(every)
        for key in ("when_unmet", "on_timeout"):  # the defaults when left out
            if key in self.fields:
                self.fields[key].required = False
        if self.instance.pk:
            self.initial["window"] = ", ".join(self.instance.window or [])
            for key in ("min_gap", "wait_timeout"):
                value = getattr(self.instance, key)
                self.initial[key] = "" if value is None else seconds_text(value)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        raw = {k: v for k, v in data.items() if k != "name" and v not in (None, "")}
        if isinstance(raw.get("window"), str):
            raw["window"] = [part.strip() for part in raw["window"].split(",")]
        raw.setdefault("spec", data.get("spec", {}))
        try:
            definition = schedules.clean_definition(data.get("name"), raw)
        except ValidationError as exc:
            for key, errors in exc.error_dict.items():
                self.add_error(None if key in ("__all__", "name") else key, errors)
            return data
        data.update(definition.fields())
        return data


def seconds_text(value: Any) -> str:
    """A duration as "<seconds>s", exact to the microsecond (the form saves what it shows)."""
    return f"{value.total_seconds():.6f}".rstrip("0").rstrip(".") + "s"


@admin.register(Schedule)
class ScheduleAdmin(DatabasePages, ScheduleAdminBase):
    """Recurring schedules: when they run next, what they last submitted, and run-now."""

    form = ScheduleForm
    list_display = [
        "name",
        "timing",
        "queue",
        "enabled",
        "next_run",
        "waiting_now",
        "last_task_link",
        "from_settings",
    ]
    list_filter = ["enabled", "from_settings", "queue"]
    search_fields = ["=name", "=queue"]
    readonly_fields = [
        "next_run",
        "last_run",
        "last_task_link",
        "from_settings",
        "waiting_now",
        "unmet_now",
        "next_runs",
        "unmet",
        "counts_events",
        "latest_firings",
    ]
    actions = ["enable_selected", "disable_selected", "run_now"]

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        if obj is not None and obj.from_settings:
            editable = {"enabled"}
            return [f for f in ScheduleForm.Meta.fields if f not in editable] + list(
                self.readonly_fields
            )
        return self.readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        return super().get_queryset(request).select_related("waiting")

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        if obj is not None and obj.from_settings:
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not obj.from_settings and (set(form.changed_data) - {"enabled"} or not change):
            schedules.reschedule(obj)

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        """Delete under the schedule's lock, its waiting firings with it (`schedules.delete`)."""
        schedules.delete(Schedule.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        schedules.delete(queryset)

    @admin.display(description=gettext_lazy("schedule"))
    def timing(self, obj: Schedule) -> str:
        if obj.trigger is not None:
            words = [triggers.describe(leaf) for leaf in triggers.leaves(obj.trigger)]
            return _("on %(events)s") % {"events": "; ".join(words)}
        if obj.every is not None:
            return f"every {short(obj.every)}"
        return f"{obj.cron} ({obj.timezone})"

    @admin.display(description=gettext_lazy("waiting"))
    def waiting_now(self, obj: Schedule) -> str:
        """The firing held for the run constraints: since when and what for."""
        try:
            waiting = obj.waiting
        except (WaitingRun.DoesNotExist, ValueError):  # ValueError: an unsaved schedule
            return "—"
        text = _("%(reason)s (since %(since)s") % {
            "reason": waiting.reason,
            "since": f"{waiting.since:%Y-%m-%d %H:%M}",
        }
        if waiting.merged:
            text += _(", %(count)d later firing(s) merged") % {"count": waiting.merged}
        if waiting.deadline is not None:
            text += _(", %(action)s at %(deadline)s") % {
                "action": obj.get_on_timeout_display(),
                "deadline": f"{waiting.deadline:%Y-%m-%d %H:%M}",
            }
        return text + ")"

    @admin.display(description=gettext_lazy("why it does not fire now"))
    def unmet_now(self, obj: Schedule) -> SafeString | str:
        """The run constraints unmet now ("why didn't it fire?")."""
        if obj.pk is None:
            return "—"
        if not obj.enabled:
            return _("Disabled.")
        unmet = constraints.why(obj, db.read_clock(obj._state.db or "default"))
        if not unmet:
            return _("Every run constraint is met: a firing now would run at once.")
        return format_html(
            "<ul>{}</ul>",
            format_html_join("", "<li>{}: {}</li>", ((u.code, u.detail) for u in unmet)),
        )

    @admin.display(description=gettext_lazy("next runs"))
    def next_runs(self, obj: Schedule) -> SafeString | str:
        """The next ten ticks: DST gaps and repeated hours marked, windows applied."""
        if obj.pk is None:
            return "—"
        if obj.trigger is not None:
            return _("none: it fires on events")
        entries = calendars.calendar(obj, db.read_clock(obj._state.db or "default"), 10)
        rows = (
            (
                f"{e.tick:%Y-%m-%d %H:%M} UTC",
                f"{e.local:%Y-%m-%d %H:%M %Z}",
                calendars.dst_text(e),
                "—" if e.runs is None else f"{e.runs:%Y-%m-%d %H:%M} UTC",
                e.note,
            )
            for e in entries
        )
        return format_html(
            "<table><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr>{}</table>",
            _("tick"),
            _("local time"),
            _("DST"),
            _("runs"),
            _("note"),
            format_html_join(
                "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows
            ),
        )

    @admin.display(description=gettext_lazy("last task"))
    def last_task_link(self, obj: Schedule) -> SafeString | str:
        if not obj.last_task:
            return "—"
        status = Task.objects.filter(rn=obj.last_task).values_list("status", flat=True).first()
        return format_html("{} ({})", task_link(obj.last_task), status or "purged")

    @admin.display(description=gettext_lazy("why has it not fired?"))
    def unmet(self, obj: Schedule) -> str:
        """What is unmet in the trigger now (a trigger's schedule only)."""
        if obj.pk is None or obj.trigger is None:
            return "—"
        return "; ".join(firings.why_not(obj)) or _("Met: it fires at the monitor's next pass.")

    @admin.display(description=gettext_lazy("counts events"))
    def counts_events(self, obj: Schedule) -> str:
        """Where the trigger counts events from: its watermark, or every event."""
        if obj.pk is None or obj.trigger is None:
            return "—"
        mark = firings.mark_of_schedule(obj)
        if mark is None:
            return _("every event no firing of it consumed (since: all)")
        return _("after event #%(after)d, from %(time)s (its trigger set then)") % {
            "after": mark.after,
            "time": f"{mark.time:%Y-%m-%d %H:%M:%S} UTC",
        }

    @admin.display(description=gettext_lazy("latest firings"))
    def latest_firings(self, obj: Schedule) -> SafeString | str:
        """The latest firings of the trigger: each task with the events it consumed, and for
        a delay, when it is (or was) due."""
        if obj.pk is None or obj.trigger is None:
            return "—"
        rows = [
            (
                task_link(firing.rn),
                firing.get_outcome_display(),
                firing.time,
                "—" if firing.due is None else f"{firing.due:%Y-%m-%d %H:%M:%S} UTC",
                ", ".join(
                    f"{c.event.kind} #{c.event.pk} {c.event.payload}"
                    for c in firing.consumptions.all()
                ),
            )
            for firing in firings.latest_firings(obj)
        ]
        if not rows:
            return _("No firing yet.")
        return format_html(
            "<table><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr>{}</table>",
            _("task"),
            _("outcome"),
            _("time"),
            _("due"),
            _("events consumed"),
            format_html_join(
                "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows
            ),
        )

    @admin.action(permissions=["change"], description=gettext_lazy("Enable selected schedules"))
    def enable_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = len(schedules.resume(queryset))  # ticks missed while paused are not caught up
        self.message_user(request, _("%(count)d enabled.") % {"count": count}, messages.SUCCESS)

    @admin.action(permissions=["change"], description=gettext_lazy("Disable selected schedules"))
    def disable_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = len(schedules.pause(queryset))
        self.message_user(request, _("%(count)d disabled.") % {"count": count}, messages.SUCCESS)

    @admin.action(permissions=["run"], description=gettext_lazy("Run now"))
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        tasks = [schedules.run_now(schedule) for schedule in queryset]
        self.message_user(
            request,
            format_html(
                _("Submitted {}."),
                format_html_join(", ", "{}", ((task_link(t.rn),) for t in tasks)),
            ),
            messages.SUCCESS,
        )

    def has_run_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("scylla_django.submit_task")


@admin.action(description=gettext_lazy("Retry selected (aborted/cancelled only)"))
def retry_selected(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Task]) -> None:
    """Resubmit each selected aborted or cancelled task with `Task.retry()`."""
    if not request.user.has_perm("scylla_django.submit_task"):
        modeladmin.message_user(request, _("You may not submit tasks."), messages.ERROR)
        return
    selected = queryset.order_by()
    total = selected.count()
    retried = 0
    for task in selected.filter(status__in=[Status.ABORTED, Status.CANCELLED]):
        try:
            task.retry()
        except (DuplicateTask, InvalidTransition):
            continue
        retried += 1
    modeladmin.message_user(
        request,
        _("%(retried)d retried, %(skipped)d skipped (not aborted or cancelled, or retried).")
        % {"retried": retried, "skipped": total - retried},
        messages.SUCCESS if retried else messages.WARNING,
    )


@admin.display(description=gettext_lazy("attempts in the chain"))
def chain(task: Task) -> SafeString | str:
    """Attempt n of the chain, with links to the previous and the next attempts."""
    following = Task.objects.filter(retry_of=task.rn).values_list("rn", flat=True).first()
    parts = [format_html("attempt {}", task.attempt)]
    if task.retry_of:
        parts.append(format_html("previous: {}", task_link(task.retry_of)))
    if following:
        parts.append(format_html("next: {}", task_link(following)))
    if task.root and task.root != task.rn:  # the first task of a chain is its own root
        parts.append(format_html("first: {}", task_link(task.root)))
    return format_html_join(" · ", "{}", ((p,) for p in parts))


def upcoming(limit: int = 10) -> list[Schedule]:
    """The enabled schedules that run next, soonest first (for the dashboard)."""
    return list(Schedule.objects.filter(enabled=True).order_by("next_run", "name")[:limit])
