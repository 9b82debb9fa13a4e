"""Which database the admin's pages read and act on: `?database=<alias>` among the databases
holding tasks (`routers.databases()`), `default` when not named; the pages of `default` read
`SCYLLA["READ_DATABASE"]` when one is set. See docs/howto/databases.md."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from django.contrib import admin
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponseBase
from django.urls import URLPattern
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import db
from ..conf import scylla_settings
from ..routers import databases, reading_from, request_database

DATABASE_PARAMETER = "database"
#: The session key that keeps the database last named, so that the pages linked from a page
#: (and the buttons on it) stay on that database.
SESSION_KEY = "scylla_django_database"


def named_database(request: HttpRequest) -> str | None:
    """The database a request names: `?database=`, or the one kept in the list's filters
    (`_changelist_filters`) on a task's page, else the one the session last named; None for
    `default`. An unknown one is a 404. A named one is kept in the session."""
    name = request.GET.get(DATABASE_PARAMETER)
    if name is None:
        kept = parse_qs(request.GET.get("_changelist_filters", ""))
        name = next(iter(kept.get(DATABASE_PARAMETER, [])), None)
    session = getattr(request, "session", None)
    if name is None:
        remembered = session.get(SESSION_KEY) if session is not None else None
        return remembered if remembered in databases() else None
    if name not in databases():
        raise Http404(_("No database holds tasks under the alias %(name)r.") % {"name": name})
    if session is not None and session.get(SESSION_KEY) != name:
        session[SESSION_KEY] = name
    return name


def database_choices(request: HttpRequest) -> dict[str, object]:
    """For a page's database switch: the databases holding tasks and the one shown (both
    empty when there is only `default`)."""
    aliases = databases()
    if len(aliases) < 2:
        return {"scylla_databases": [], "scylla_database": ""}
    return {"scylla_databases": aliases, "scylla_database": named_database(request) or aliases[0]}


def on_named_database(
    view: Callable[..., HttpResponseBase],
) -> Callable[..., HttpResponseBase]:
    """`view`, run (and its page rendered) within `routers.request_database()`."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        with request_database(named_database(request), request.method):
            response = view(request, *args, **kwargs)
            render = getattr(response, "render", None)
            if render is not None and not getattr(response, "is_rendered", True):
                render()  # the page's columns read rows too: within the same database
        return response

    return wrapper


class DatabasePages:
    """A model admin whose every page runs on the database the request names."""

    def get_urls(self) -> list[Any]:
        urls: list[Any] = super().get_urls()  # type: ignore[misc]
        for pattern in urls:
            if isinstance(pattern, URLPattern):
                pattern.callback = on_named_database(pattern.callback)
        return urls


class DatabaseFilter(admin.SimpleListFilter):
    """The database of the list (shown when queues are routed to several): its parameter
    is read by `on_named_database`, which has already chosen the database."""

    title = gettext_lazy("database")
    parameter_name = DATABASE_PARAMETER

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        aliases = databases()
        return [(alias, alias) for alias in aliases] if len(aliases) > 1 else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset


def replica_note() -> str | None:
    """How far behind the replica that this page was read from is; None when the page was
    read from a primary (or a database that cannot tell)."""
    alias = reading_from()
    if alias is None or alias != scylla_settings.READ_DATABASE:
        return None
    lag = db.replica_lag(alias)
    if lag is None:
        return None
    if lag.replayed_ago is None:
        behind = _("no transaction replayed yet")
    else:
        seconds = max(lag.replayed_ago.total_seconds(), 0.0)
        behind = _("last replayed commit %(seconds).1f s ago") % {"seconds": seconds}
    note = _("Read from the replica %(alias)r: %(behind)s, %(bytes)s bytes of WAL not replayed") % {
        "alias": alias,
        "behind": behind,
        "bytes": f"{lag.unreplayed_bytes:,}",
    }
    if lag.paused:
        note += _(" (replay is paused)")
    return note + "."


@admin.display(description=gettext_lazy("replica"))
def replica_lag(obj: Any) -> str:
    """A read-only field: how far behind the replica this page was read from is."""
    return replica_note() or "-"
