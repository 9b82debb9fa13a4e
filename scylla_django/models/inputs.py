"""What task operations take and check: the options and outcomes of a submission, and the
validation of their arguments (parents, retry policy, `not_before`, statuses to purge)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypedDict

from django.core.exceptions import ValidationError
from django.utils import timezone

from .. import retries
from ..conf import scylla_settings
from ..enums import (
    TERMINAL_STATUSES,
)
from ..validation import (
    validate_rn,
)
from .dependencies import MAX_PARENTS


@dataclass(frozen=True)
class SubmitDefaults:
    """The settings a submission applies: read once for a whole `submit_many()` batch."""

    spec_size_limit: int
    priority: int

    @classmethod
    def read(cls) -> SubmitDefaults:
        return cls(scylla_settings.SPEC_SIZE_LIMIT, scylla_settings.DEFAULT_PRIORITY)


class TaskOptions(TypedDict, total=False):
    """The optional fields of a new task, as `submit()` and `Task.build()` take them."""

    priority: int | None
    rn: str | None
    not_before: datetime | None
    retry: retries.Retry | Mapping[str, Any] | None


@dataclass(frozen=True)
class SubmitOutcome:
    """What happened to one item of `Task.objects.submit_many`."""

    index: int
    rn: str | None
    outcome: Literal["inserted", "duplicate", "invalid"]
    errors: dict[str, list[str]] = field(default_factory=dict)


def _validate_after(after: object) -> list[str]:
    if isinstance(after, str) or not isinstance(after, Sequence):
        raise ValidationError(
            {"after": ValidationError("after is a list of task rns.", code="invalid_after")}
        )
    parents = list(dict.fromkeys(after))
    if not 1 <= len(parents) <= MAX_PARENTS:
        raise ValidationError(
            {
                "after": ValidationError(
                    f"after names 1..{MAX_PARENTS} tasks, not {len(parents)}.",
                    code="invalid_after",
                )
            }
        )
    for rn in parents:
        try:
            validate_rn(rn)
        except ValidationError as exc:
            raise ValidationError({"after": exc}) from None
    return parents


def _validate_retry(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, retries.Retry):
        return value.as_json()
    if not isinstance(value, Mapping):
        raise ValidationError(
            "retry must be a Retry(...) or its JSON object.", code="invalid_retry"
        )
    return retries.Retry.from_json(value).as_json()


def _validate_not_before(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError("not_before must be a datetime.", code="invalid_not_before")
    if timezone.is_naive(value):
        raise ValidationError("not_before must be timezone-aware.", code="invalid_not_before")
    return value


def _error_dict(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {k: [str(m) for e in v for m in e.messages] for k, v in exc.error_dict.items()}
    return {"__all__": list(exc.messages)}


def _terminal_statuses(statuses: Iterable[str] | None) -> list[str]:
    if statuses is None:
        return sorted(TERMINAL_STATUSES)
    chosen = sorted(set(statuses))
    wrong = [s for s in chosen if s not in {t.value for t in TERMINAL_STATUSES}]
    if wrong or not chosen:
        raise ValidationError(
            f"Only terminal tasks can be purged (completed, aborted, cancelled), not {wrong}.",
            code="invalid_status",
        )
    return chosen
