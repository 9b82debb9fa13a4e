"""Keyset ("cursor") pagination of the task list, in any allowed ordering.

DRF's `CursorPagination` keys pages on the first ordering field alone and steps over ties with
an offset (capped at 1000), which breaks down on a column as repetitive as `priority` or
`status`. Here a cursor holds the ordering, the boundary row's value of the ordering field and
its id, and the next page is `WHERE (field, id) < (value, id)` (or `>`): every page costs the
same however deep it is, rows are never skipped or repeated because of ties, and a row
inserted meanwhile never shifts the pages.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from rest_framework.exceptions import ErrorDetail, NotFound, ValidationError
from rest_framework.pagination import BasePagination, CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from ..models import Task
from ..validation import RN_MAX_LENGTH

ORDERING_FIELDS = ("created", "updated", "priority", "status", "queue", "rn")
ORDERINGS = tuple(f"{sign}{field}" for field in ORDERING_FIELDS for sign in ("", "-"))
DATETIME_FIELDS = frozenset({"created", "updated"})
MAX_ID = 2**63 - 1
MAX_STRING = RN_MAX_LENGTH  # the longest of rn, queue and status


@dataclass(frozen=True)
class Cursor:
    """A position in one ordering: the boundary row's value and id, and the direction."""

    ordering: str
    value: Any
    id: int
    reverse: bool

    def encode(self) -> str:
        value = self.value.isoformat() if isinstance(self.value, datetime) else self.value
        raw = json.dumps([self.ordering, value, self.id, int(self.reverse)], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def invalid(param: str, message: str, code: str) -> ValidationError:
    return ValidationError({param: [ErrorDetail(message, code=code)]})


def strict_page_size(request: Request, param: str, default: int, maximum: int) -> int:
    """`?<param>=`: a positive integer (a larger one is capped at `maximum`), else a 400."""
    raw = request.query_params.get(param)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not raw.strip("0"):
        raise invalid(param, "A page size is a positive integer.", "invalid")
    return min(int(raw), maximum) if len(raw) < 10 else maximum


class TaskCursorPagination(BasePagination):
    """`?ordering=` one of `ORDERINGS` (default `-created`), `?page_size=` (default 50, at most
    500), and `?cursor=` from a previous page's `next` or `previous` link.

    Rows that tie on the ordering field come in id order, in the same direction.
    """

    page_size = 50
    max_page_size = 500
    default_ordering = "-created"
    cursor_query_param = "cursor"
    page_size_query_param = "page_size"
    ordering_query_param = "ordering"

    def paginate_queryset(
        self,
        queryset: models.QuerySet[Any, Any] | Sequence[Any],
        request: Request,
        view: APIView | None = None,
    ) -> list[Any]:
        if not isinstance(queryset, models.QuerySet):
            raise TypeError("Keyset pagination pages a QuerySet.")
        self.base_url = request.build_absolute_uri()
        self.ordering = self.get_ordering(request)
        size = self.get_page_size(request)
        cursor = self.decode_cursor(request)
        field = self.ordering.lstrip("-")
        reverse = cursor is not None and cursor.reverse
        descending = self.ordering.startswith("-") != reverse
        order = (f"-{field}", "-id") if descending else (field, "id")
        queryset = queryset.order_by(*order)
        if cursor is not None:
            op = "lt" if descending else "gt"
            value = cursor.value
            # (field, id) beyond (value, id); the first term lets an index on the field bound
            # the scan, which the OR alone would not.
            queryset = queryset.filter(
                Q(**{f"{field}__{op}e": value}),
                Q(**{f"{field}__{op}": value}) | Q(**{field: value, f"id__{op}": cursor.id}),
            )
        rows = list(queryset[: size + 1])
        more = len(rows) > size
        self.page = rows[:size]
        if reverse:
            self.page.reverse()
        self.has_next = cursor is not None if reverse else more
        self.has_previous = more if reverse else cursor is not None
        return self.page

    # -- parameters ---------------------------------------------------------------------------

    def get_ordering(self, request: Request) -> str:
        ordering = request.query_params.get(self.ordering_query_param, self.default_ordering)
        if ordering not in ORDERINGS:
            raise invalid(
                self.ordering_query_param,
                _("Order by one of: %(orderings)s.") % {"orderings": ", ".join(ORDERINGS)},
                "invalid_choice",
            )
        return ordering

    def get_page_size(self, request: Request) -> int:
        return strict_page_size(
            request, self.page_size_query_param, self.page_size, self.max_page_size
        )

    def decode_cursor(self, request: Request) -> Cursor | None:
        raw = request.query_params.get(self.cursor_query_param)
        if raw is None or raw == "":
            return None
        try:
            text = base64.urlsafe_b64decode(raw.encode("ascii") + b"=" * (-len(raw) % 4))
            ordering, value, pk, reverse = json.loads(text)
        except (ValueError, TypeError, binascii.Error, RecursionError):
            raise self.invalid_cursor() from None
        if ordering != self.ordering:
            raise self.invalid_cursor(_("This cursor belongs to another ordering."))
        value = self.check_value(ordering.lstrip("-"), value)
        if isinstance(pk, bool) or not isinstance(pk, int) or not 0 < pk <= MAX_ID:
            raise self.invalid_cursor()
        if reverse not in (0, 1):
            raise self.invalid_cursor()
        return Cursor(ordering, value, pk, bool(reverse))

    def check_value(self, field: str, value: Any) -> Any:
        """The cursor's value for `field`, if it is one that column can hold."""
        if field in DATETIME_FIELDS:
            try:
                parsed = parse_datetime(value) if isinstance(value, str) else None
                if parsed is None or parsed.tzinfo is None:
                    raise ValueError(value)
                return parsed.astimezone(UTC)
            except (ValueError, OverflowError):
                raise self.invalid_cursor() from None
        if field == "priority":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
                raise self.invalid_cursor()
            return value
        if not isinstance(value, str) or "\x00" in value or len(value) > MAX_STRING:
            raise self.invalid_cursor()
        return value

    def invalid_cursor(self, message: str | None = None) -> NotFound:
        """A cursor that is not one of ours: a 404, as with DRF's cursor pagination."""
        return NotFound(message or _("Invalid cursor."), code="invalid_cursor")

    # -- links --------------------------------------------------------------------------------

    def link(self, row: Task | None, reverse: bool) -> str:
        url = remove_query_param(self.base_url, self.cursor_query_param)
        if row is None:
            return url
        field = self.ordering.lstrip("-")
        cursor = Cursor(self.ordering, getattr(row, field), row.pk, reverse)
        return replace_query_param(url, self.cursor_query_param, cursor.encode())

    def get_next_link(self) -> str | None:
        if not self.has_next:
            return None
        # An empty page reached backwards has nothing to continue from: start again.
        return self.link(self.page[-1] if self.page else None, reverse=False)

    def get_previous_link(self) -> str | None:
        if not self.has_previous or not self.page:
            return None
        return self.link(self.page[0], reverse=True)

    # -- response and schema ------------------------------------------------------------------

    def get_paginated_response(self, data: Sequence[Any]) -> Response:
        return Response(
            {"next": self.get_next_link(), "previous": self.get_previous_link(), "results": data}
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        link = {"type": "string", "format": "uri", "nullable": True}
        return {
            "type": "object",
            "required": ["next", "previous", "results"],
            "properties": {"next": link, "previous": link, "results": schema},
        }

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return [
            {
                "name": self.ordering_query_param,
                "in": "query",
                "required": False,
                "description": "Sort order; ties come in id order. Default `-created`.",
                "schema": {"type": "string", "enum": list(ORDERINGS)},
            },
            *page_parameters(self, "Tasks"),
        ]


class NewestFirstPagination(CursorPagination):
    """Rows newest first (by id, unique), `?page_size=` (default 100, at most 500), and
    `?cursor=` from a previous page's `next` or `previous` link.

    A cursor whose position is not an id is refused as DRF refuses any other bad cursor (404
    `invalid_cursor`), before it reaches the database.
    """

    ordering = "-id"
    page_size = 100
    max_page_size = 500
    page_size_query_param = "page_size"
    #: What a page holds, for the schema ("Workers").
    items = "Rows"

    def get_page_size(self, request: Request) -> int:
        return strict_page_size(
            request, self.page_size_query_param, self.page_size, self.max_page_size
        )

    def decode_cursor(self, request: Request) -> Any:
        invalid = NotFound(self.invalid_cursor_message, code="invalid_cursor")
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise invalid from None
        # A string as decoded (the stubs say an int): DRF puts it in the query unchecked.
        position = None if cursor is None or cursor.position is None else str(cursor.position)
        if position is not None and not (
            position.isascii() and position.isdigit() and 0 < int(position) <= MAX_ID
        ):
            raise invalid
        return cursor

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return page_parameters(self, self.items)


class WorkerCursorPagination(NewestFirstPagination):
    """Workers, newest first."""

    items = "Workers"


class EventCursorPagination(NewestFirstPagination):
    """Events, newest first."""

    items = "Events"


def page_parameters(paging: Any, items: str) -> list[dict[str, Any]]:
    """The schema of the page size and cursor query parameters of `paging`, a cursor
    pagination of `items` ("Tasks", "Workers")."""
    return [
        {
            "name": paging.page_size_query_param,
            "in": "query",
            "required": False,
            "description": f"{items} per page: default {paging.page_size}, at most "
            f"{paging.max_page_size} (larger values are capped).",
            "schema": {"type": "integer", "minimum": 1},
        },
        {
            "name": paging.cursor_query_param,
            "in": "query",
            "required": False,
            "description": "A page's position, from a `next` or `previous` link.",
            "schema": {"type": "string"},
        },
    ]
