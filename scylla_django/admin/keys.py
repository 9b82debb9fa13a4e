"""The key pages, for operators: "Locks and limits" (the locks held now, by tasks and holds, with
force-release; the limits and rates with their use) and the Limit, Rate and Hold admins. A limit
or a rate is changed at runtime in its change form (one write; the next lease uses it); a hold
is force-released by an action or the page's button (one DELETE). Changing needs
`scylla_django.control_queue`, looking `view_task`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from ..models import Hold, Limit, Rate, Task, key_control
from ..models.keys import parse_rate, rate_text
from ..validation import key_name
from .console import ConsoleView
from .databases import DatabasePages
from .display import CSS, can_view_tasks, changelist_url, moment
from .permissions import may_control

logger = logging.getLogger("scylla_django")

if TYPE_CHECKING:  # django-stubs makes these generic; Django's classes cannot be subscripted
    LimitAdminBase = admin.ModelAdmin[Limit]
    RateAdminBase = admin.ModelAdmin[Rate]
    HoldAdminBase = admin.ModelAdmin[Hold]
else:
    LimitAdminBase = RateAdminBase = HoldAdminBase = admin.ModelAdmin


class KeyAdmin(DatabasePages):
    """What the key admins share: looking needs `view_task`, changing `control_queue`;
    nothing is deleted here."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view_tasks(request) or may_control(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return may_control(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return may_control(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LimitForm(forms.ModelForm):  # type: ignore[type-arg]
    """A limit: its name (a key's) and its size, 1 to `key_control.MAX_LIMIT`."""

    class Meta:
        model = Limit
        fields = ["name", "max_running"]

    def clean_name(self) -> str:
        return key_name(self.cleaned_data["name"], "limits")

    def clean_max_running(self) -> int:
        return key_control.validate_limit_size(self.cleaned_data["max_running"])


@admin.register(Limit)
class LimitAdmin(KeyAdmin, LimitAdminBase):
    """Limits: their size, editable at runtime, and the running tasks holding a slot."""

    form = LimitForm
    list_display = ("name", "max_running", "running", "tasks_link")
    search_fields = ("name",)

    class Media:
        css = {"all": (CSS,)}

    def get_readonly_fields(self, request: HttpRequest, obj: Limit | None = None) -> Any:
        return ("name",) if obj is not None else ()

    @admin.display(description="running now")
    def running(self, limit: Limit) -> str:
        uses = {use.name: use for use in key_control.limit_use(Task.objects.all())}
        use = uses.get(limit.name)
        return f"{use.running}/{use.max_running}" if use else "-"

    @admin.display(description="tasks")
    def tasks_link(self, limit: Limit) -> str:
        return format_html('<a href="{}">tasks naming it</a>', changelist_url(key=limit.name))

    def save_model(self, request: HttpRequest, obj: Limit, form: Any, change: bool) -> None:
        """`key_control.set_limit`: the next lease uses the new size."""
        key_control.set_limit(obj.name, obj.max_running)
        logger.info("%s set limit %s to %d", request.user, obj.name, obj.max_running)


class RateForm(forms.ModelForm):  # type: ignore[type-arg]
    """A rate, written as settings write it: "100/m", "5/10s"."""

    rate = forms.CharField(max_length=20, help_text='"<count>/<period>": "100/m", "5/10s".')

    class Meta:
        model = Rate
        fields = ["name"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["rate"].initial = rate_text(self.instance.count, self.instance.seconds)

    def clean_name(self) -> str:
        return key_name(self.cleaned_data["name"], "rate_key")

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if "rate" in cleaned:
            try:
                self.instance.count, self.instance.seconds = parse_rate(cleaned["rate"])
            except ValidationError as exc:
                self.add_error("rate", exc)
        return cleaned


@admin.register(Rate)
class RateAdmin(KeyAdmin, RateAdminBase):
    """Rates: their count and period, editable at runtime, and the starts within the period."""

    form = RateForm
    list_display = ("name", "rate_text", "starts", "tasks_link")
    search_fields = ("name",)

    class Media:
        css = {"all": (CSS,)}

    def get_readonly_fields(self, request: HttpRequest, obj: Rate | None = None) -> Any:
        return ("name",) if obj is not None else ()

    @admin.display(description="rate")
    def rate_text(self, rate: Rate) -> str:
        return rate_text(rate.count, rate.seconds)

    @admin.display(description="starts in the period")
    def starts(self, rate: Rate) -> str:
        uses = {use.name: use for use in key_control.rate_use()}
        use = uses.get(rate.name)
        return f"{use.starts}/{use.count}" if use else "-"

    @admin.display(description="tasks")
    def tasks_link(self, rate: Rate) -> str:
        return format_html('<a href="{}">tasks naming it</a>', changelist_url(key=rate.name))

    def save_model(self, request: HttpRequest, obj: Rate, form: Any, change: bool) -> None:
        """`key_control.set_rate`: the next lease uses the new rate."""
        text = rate_text(obj.count, obj.seconds)
        key_control.set_rate(obj.name, text)
        logger.info("%s set rate %s to %s", request.user, obj.name, text)


@admin.register(Hold)
class HoldAdmin(KeyAdmin, HoldAdminBase):
    """Holds of code outside tasks (`scylla_django.lock()`): force-released by the action."""

    list_display = ("pk", "lock", "mode", "since_at", "until_at")
    actions = ("force_release_selected",)
    ordering = ("-pk",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_control_permission(self, request: HttpRequest) -> bool:
        return may_control(request)

    @admin.display(description="lock")
    def lock(self, hold: Hold) -> str:
        return hold.key[2:]

    @admin.display(description="mode")
    def mode(self, hold: Hold) -> str:
        return "exclusive" if hold.exclusive else "shared"

    @admin.display(description="since")
    def since_at(self, hold: Hold) -> Any:
        return moment(hold.since)

    @admin.display(description="until")
    def until_at(self, hold: Hold) -> Any:
        return "until released" if hold.until is None else moment(key_control.instant(hold.until))

    @admin.action(permissions=["control"], description="Force-release selected holds")
    def force_release_selected(self, request: HttpRequest, queryset: QuerySet[Hold]) -> None:
        """Drop the selected holds (one DELETE each, whoever holds them)."""
        released = sum(
            key_control.force_release_hold(pk) for pk in queryset.values_list("pk", flat=True)
        )
        logger.info("%s force-released %d holds", request.user, released)
        self.message_user(request, f"{released} holds force-released.", messages.SUCCESS)


class KeysView(ConsoleView):
    """The "Locks and limits" page beside the task list. GET: the locks held, the limits and the
    rates with their use. POST `hold`: force-release that hold (one DELETE), then back to the
    page."""

    http_method_names = ["get", "head", "post"]

    def get(self, request: HttpRequest) -> HttpResponse:
        context = {
            **self.page(request, "Locks and limits"),
            "locks": key_control.held_locks(Task.objects.all()),
            "limits": key_control.limit_use(Task.objects.all()),
            "rates": key_control.rate_use(),
            "may_control": may_control(request),
        }
        return TemplateResponse(request, "scylla_django/admin/keys.html", context)

    def post(self, request: HttpRequest) -> HttpResponse:
        if not may_control(request):
            raise PermissionDenied
        token = request.POST.get("hold", "")
        if token.isdigit() and len(token) <= 18 and key_control.force_release_hold(int(token)):
            logger.info("%s force-released hold %s", request.user, token)
            self.say(request, f"Hold {token} force-released.", messages.SUCCESS)
        else:
            self.say(request, f"No hold {token} to release.", messages.WARNING)
        return HttpResponseRedirect(reverse("admin:scylla_django_task_keys"))
