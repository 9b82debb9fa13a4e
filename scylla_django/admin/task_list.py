"""The task list, built for millions of rows: a count that never scans them all, a query that
leaves out the payloads and sorts only on indexes, and a search by equality only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KT
from django.http import HttpRequest
from django.utils.functional import cached_property

from .. import db
from ..validation import UNIQUE_KEY_MAX_LENGTH, queue_validator, rn_validator, worker_id

COUNT_CAP = 10_000

if TYPE_CHECKING:  # django-stubs makes Paginator generic; Django's cannot be subscripted
    PaginatorBase = Paginator[Any]
else:
    PaginatorBase = Paginator


# -- counting --------------------------------------------------------------------------------


class ApproximateCount(int):
    """A row count from the planner's estimate: a number to compute with, "about N" to read."""

    def __str__(self) -> str:
        return f"about {int(self):,}"


def estimate_count(queryset: QuerySet[Any]) -> int:
    """The number of rows of `queryset` when it holds more than `COUNT_CAP`.

    PostgreSQL: the planner's estimate from EXPLAIN, kept current by autovacuum's ANALYZE, as an
    ApproximateCount (never below the cap). Other databases: an exact COUNT(*).
    """
    planned = db.planned_rows(queryset)
    if planned is None:
        return queryset.count()
    return ApproximateCount(max(planned, COUNT_CAP + 1))


class EstimatingPaginator(PaginatorBase):
    """A paginator whose count never scans more than `COUNT_CAP` + 1 rows.

    Up to the cap the count is exact (`SELECT COUNT(*) FROM (… LIMIT 10001)`), past it it is
    `estimate_count()`: a filtered list of a million tasks is counted in milliseconds.
    """

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            raise TypeError("EstimatingPaginator pages through querysets")
        capped = queryset.order_by()[: COUNT_CAP + 1].count()
        return capped if capped <= COUNT_CAP else estimate_count(queryset)


# -- the rows --------------------------------------------------------------------------------


class TaskChangeList(ChangeList):
    """The task list's ChangeList: leaves out the JSON payloads, sorts only on indexes."""

    def get_queryset(
        self, request: HttpRequest, exclude_parameters: list[str | None] | None = None
    ) -> QuerySet[Any]:
        queryset = super().get_queryset(request, exclude_parameters)
        # The first error's code only, extracted by the database: `errors` may weigh a MiB.
        deferred: QuerySet[Any] = queryset.defer("spec", "result", "errors")
        annotated: QuerySet[Any] = deferred.annotate(error_code=KT("errors__0__code"))
        return annotated

    def get_ordering_field(self, field_name: Any) -> Any:
        """Only `sortable_by` columns sort, whatever `?o=` says: others would sort every row."""
        if self.sortable_by is not None and field_name not in self.sortable_by:
            return None
        return super().get_ordering_field(field_name)


# -- the search ------------------------------------------------------------------------------


def search(queryset: QuerySet[Any], search_term: str) -> QuerySet[Any]:
    """The tasks of `queryset` that each word of `search_term` names: the words must each equal
    the rn, the queue, (for `worker-<n>`) the owner, or the unique key.

    Equality, never LIKE: rn, queue and unique key are then answered by their indexes. owner
    has no index, so it is tried only for words that are worker names; a word that cannot be any
    of them (e.g. one holding a character no name may hold) matches nothing.
    """
    for term in search_term.split():
        match = Q(unique_key=term) if len(term) <= UNIQUE_KEY_MAX_LENGTH else Q()
        for field, validator in (("rn", rn_validator), ("queue", queue_validator)):
            try:
                validator(term)
            except ValidationError:
                continue
            match |= Q(**{field: term})
        if worker_id(term) is not None:
            match |= Q(owner=term)
        if not match:
            return queryset.none()
        queryset = queryset.filter(match)
    return queryset
