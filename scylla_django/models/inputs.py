"""What task operations take and check: the options and outcomes of a submission, the field
values of a new task (`task_values`), and the validation of their arguments (parents, retry
policy, `not_before`, statuses to purge)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal, TypedDict

from django.core.exceptions import ValidationError
from django.utils import timezone

from .. import retries, spec_versions, tracing
from ..conf import scylla_settings
from ..enums import (
    TERMINAL_STATUSES,
)
from ..notify import NOTIFY_QUEUE, default_notify, validate_notify
from ..queue_keys import default_keys
from ..text import TIMEOUT_MAX, DurationError, positive_duration
from ..validation import (
    FieldErrors,
    validate_json,
    validate_on_conflict,
    validate_priority,
    validate_queue,
    validate_rn,
    validate_timeout,
    validate_traceparent,
    validate_unique_key,
    validate_unique_window,
)
from .dependencies import MAX_PARENTS
from .fairness import fair_value
from .keys import key_values


@dataclass(frozen=True)
class SubmitDefaults:
    """The settings a submission applies: read once for a whole `submit_many()` batch."""

    spec_size_limit: int
    priority: int

    @classmethod
    def read(cls) -> SubmitDefaults:
        """The defaults as the settings give them now."""
        return cls(scylla_settings.SPEC_SIZE_LIMIT, scylla_settings.DEFAULT_PRIORITY)


class TaskOptions(TypedDict, total=False):
    """The optional fields of a new task, as `submit()` and `Task.build()` take them."""

    priority: int | None
    rn: str | None
    not_before: datetime | None
    retry: retries.Retry | Mapping[str, Any] | None
    unique_key: str | None
    unique_window: timedelta | float | str | None
    locks: Sequence[str | tuple[str, str]] | None
    limits: Sequence[str] | None
    order_key: str | None
    order_on_failure: str | None
    rate_key: str | None
    fair_key: str | int | tuple[str, str | int] | None
    timeout: timedelta | float | str | None
    parent: str | None
    expires_in: timedelta | float | str | None
    expires_at: datetime | None
    batch: int | None
    notify: str | None
    traceparent: str | None


@dataclass(frozen=True)
class SubmitOutcome:
    """What happened to one item of `Task.objects.submit_many`."""

    index: int
    rn: str | None
    outcome: Literal["inserted", "duplicate", "replaced", "invalid", "full"]
    errors: dict[str, list[str]] = field(default_factory=dict)
    #: The code of each message of `errors`, field by field in the same order: the codes
    #: `submit()` raises for the same input (`unknown_limit`, `invalid_key`, ...).
    codes: dict[str, list[str]] = field(default_factory=dict)


class BulkSubmission:
    """The items of a `submit_many()` call, validated as they are taken (`chunks()`).

    `outcomes` holds the invalid items and the duplicates within the batch, by index;
    `pending`, the others, in order, each with its index.
    """

    def __init__(self, items: Iterable[Mapping[str, Any]]) -> None:
        self.items = items
        self.outcomes: dict[int, SubmitOutcome] = {}
        self.pending: list[tuple[int, dict[str, Any]]] = []

    def chunks(self, size: int) -> Iterator[list[dict[str, Any]]]:
        """The field values of the valid, new items, `size` at a time (the last may hold
        fewer): each chunk is validated when it is asked for."""
        defaults = SubmitDefaults.read()
        seen: set[str] = set()
        chunk: list[dict[str, Any]] = []
        for index, item in enumerate(self.items):
            try:
                task = task_values_from(item, defaults)
            except ValidationError as exc:
                rn = item.get("rn") if isinstance(item, Mapping) else None
                self.outcomes[index] = SubmitOutcome(
                    index,
                    rn if isinstance(rn, str) else None,
                    "invalid",
                    _error_dict(exc),
                    _error_codes(exc),
                )
                continue
            rn = task["rn"]
            if rn in seen:
                self.outcomes[index] = SubmitOutcome(index, rn, "duplicate")
                continue
            seen.add(rn)
            self.pending.append((index, task))
            chunk.append(task)
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def new_rn() -> str:
    """A new random rn: a version 4 UUID in its usual text form, as `str(uuid.uuid4())` gives
    it, written out from 16 random bytes for less (bulk submissions generate one per task)."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


def validate_after(after: object) -> list[str]:
    """The parents named by `after` (a list of 1..MAX_PARENTS rns), without repeats."""
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
    """A task's own retry policy as stored: the JSON of a Retry, or None."""
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
    """A timezone-aware datetime, or None."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError("not_before must be a datetime.", code="invalid_not_before")
    if timezone.is_naive(value):
        raise ValidationError("not_before must be timezone-aware.", code="invalid_not_before")
    return value


def _validate_expiry(
    expires_in: object, expires_at: object, not_before: datetime | None
) -> datetime | None:
    """When a task expires: `expires_at` (a timezone-aware datetime in the future), or
    `expires_in` (a positive duration) from now by this host's clock; at most one of them,
    and not before `not_before`."""
    if expires_in is not None and expires_at is not None:
        raise ValidationError("Give expires_in or expires_at, not both.", code="invalid_expires_at")
    if expires_in is not None:
        try:
            expires_at = timezone.now() + positive_duration(expires_in, maximum=TIMEOUT_MAX)
        except DurationError:
            raise ValidationError(
                f"expires_in must be a positive duration, not {expires_in!r}.",
                code="invalid_expires_in",
            ) from None
    if expires_at is None:
        return None
    if not isinstance(expires_at, datetime) or timezone.is_naive(expires_at):
        raise ValidationError(
            "expires_at must be a timezone-aware datetime.", code="invalid_expires_at"
        )
    if expires_at <= timezone.now():
        raise ValidationError(
            f"expires_at {expires_at.isoformat()} is in the past.", code="invalid_expires_at"
        )
    if not_before is not None and expires_at <= not_before:
        raise ValidationError(
            "expires_at is not after not_before: the task could never start.",
            code="invalid_expires_at",
        )
    return expires_at


def _error_dict(exc: ValidationError) -> dict[str, list[str]]:
    """The messages of `exc` by field (`__all__` for those of no field)."""
    if hasattr(exc, "error_dict"):
        return {k: [str(m) for e in v for m in e.messages] for k, v in exc.error_dict.items()}
    return {"__all__": list(exc.messages)}


def _error_codes(exc: ValidationError) -> dict[str, list[str]]:
    """The codes of `exc`'s messages by field, as `_error_dict` lists the messages
    ("invalid" for a message raised without a code)."""
    if hasattr(exc, "error_dict"):
        return {
            k: [one.code or "invalid" for e in v for one in e.error_list]
            for k, v in exc.error_dict.items()
        }
    return {"__all__": [one.code or "invalid" for one in exc.error_list]}


def validate_terminal_statuses(statuses: Iterable[str] | None) -> list[str]:
    """The statuses to purge: all terminal ones by default; ValidationError for another."""
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


def task_values(
    queue: str,
    spec: Any,
    *,
    priority: int | None = None,
    rn: str | None = None,
    not_before: datetime | None = None,
    retry: retries.Retry | Mapping[str, Any] | None = None,
    unique_key: str | None = None,
    unique_window: timedelta | float | str | None = None,
    locks: Sequence[str | tuple[str, str]] | None = None,
    limits: Sequence[str] | None = None,
    order_key: str | None = None,
    order_on_failure: str | None = None,
    rate_key: str | None = None,
    fair_key: str | int | tuple[str, str | int] | None = None,
    timeout: timedelta | float | str | None = None,
    parent: str | None = None,
    expires_in: timedelta | float | str | None = None,
    expires_at: datetime | None = None,
    batch: int | None = None,
    notify: str | None = None,
    traceparent: str | None = None,
    defaults: SubmitDefaults | None = None,
) -> dict[str, Any]:
    """The field values of a new task, validated (a generated rn if none is given).

    A task without `unique_key`, `locks`, `limits`, `order_key`, `order_on_failure` or
    `rate_key` takes its queue's default (`@handler(unique_key=..., locks=..., ...)`), if
    any; a `unique_window` needs a key. The unique fields are in the values only for a
    keyed task, so a keyless one is submitted exactly as before keys existed.

    `batch` is the pk of the batch the task is submitted in (`scylla_django.batches`).
    `notify` is the URL its outcome is POSTed to once final (`scylla_django.notify`), else
    its queue's (`@handler(notify=...)`).

    The task is stamped with the spec version its queue's handler declares
    (`@handler(version=...)`; none: no version). `traceparent` is the W3C trace context of the
    span that submits it (default: the current OpenTelemetry span's, if any); it is in the
    values under `traceparent` for the submission to store beside the task (`traces`), never
    on it.
    `fair_key` is the task's value of the key its queue shares its capacity by (a tenant:
    "42", 42, or `("tenant", 42)`); without one, a member of the queue's fair key family
    that the task names in `limits`, `rate_key` or `order_key` (`("tenant", 42)`) gives it
    (`fairness.fair_value`).

    `defaults` are the settings that apply, read once by a caller that validates many.
    Raises ValidationError naming every bad field.
    """
    if defaults is None:
        defaults = SubmitDefaults.read()
    errors = FieldErrors()
    check = errors.check
    values = dict(
        rn=new_rn() if rn is None else check("rn", validate_rn, rn),
        queue=check("queue", validate_queue, queue),
        spec=check("spec", partial(validate_json, limit=defaults.spec_size_limit), spec),
        priority=check(
            "priority",
            validate_priority,
            defaults.priority if priority is None else priority,
        ),
        not_before=check("not_before", _validate_not_before, not_before),
        retry_policy=check("retry", _validate_retry, retry),
    )
    if timeout is not None:
        values["timeout"] = check("timeout", validate_timeout, timeout)
    given: dict[str, Any] = {
        "unique_key": unique_key,
        "locks": locks,
        "limits": limits,
        "order_key": order_key,
        "order_on_failure": order_on_failure,
        "rate_key": rate_key,
    }
    if values["queue"] is not None and values["spec"] is not None:
        try:
            given.update(default_keys(values["queue"], values["spec"], given))
        except ValidationError as exc:
            for name, messages in exc.error_dict.items():
                errors[name] = ValidationError(messages)
    unique_key = check("unique_key", validate_unique_key, given["unique_key"])
    locks, limits, rate_key = given["locks"], given["limits"], given["rate_key"]
    order_key, order_on_failure = given["order_key"], given["order_on_failure"]
    expiry = check(
        "expires_in" if expires_in is not None else "expires_at",
        partial(_validate_expiry, expires_in, expires_at),
        values["not_before"],
    )
    if expiry is not None:
        values["expires_at"] = expiry
    if parent is not None:
        values["parent"] = check("parent", validate_rn, parent)
    if notify is None and values["queue"] is not None:
        notify = default_notify(values["queue"])
    if notify is not None:
        if values["queue"] == NOTIFY_QUEUE:
            errors["notify"] = ValidationError(
                "A notification's delivery is not notified.", code="invalid_notify"
            )
        else:
            values["notify"] = check("notify", validate_notify, notify)
    window = check("unique_window", validate_unique_window, unique_window)
    if window is not None and unique_key is None and "unique_key" not in errors:
        errors["unique_window"] = ValidationError(
            "unique_window needs a unique_key.", code="invalid_unique_window"
        )
    if traceparent is None:
        traceparent = tracing.current_traceparent()
    else:
        traceparent = check("traceparent", validate_traceparent, traceparent)
    errors.raise_any()
    if traceparent is not None:
        values["traceparent"] = traceparent
    version = spec_versions.declared_version(values["queue"])
    if version is not None:
        values["version"] = version
    if batch is not None:
        values["batch_id"] = batch
    if unique_key is not None:
        values.update(unique_key=unique_key, unique_window=window, unique_held=window is not None)
    fair = fair_value(values["queue"], fair_key, limits, rate_key, order_key)
    if fair is not None:
        values["fair_key"] = fair
    if any(v is not None for v in (locks, limits, order_key, rate_key)):
        values.update(key_values(locks, limits, order_key, order_on_failure, rate_key))
    elif order_on_failure is not None:
        raise ValidationError(
            {"order_on_failure": ValidationError("No order_key.", code="invalid_key")}
        )
    return values


def on_conflict_of(value: object) -> str:
    """A submission's `on_conflict` (default "return"), or ValidationError naming the field."""
    if value is None:
        return "return"
    try:
        return validate_on_conflict(value)
    except ValidationError as exc:
        raise ValidationError({"on_conflict": exc}) from None


#: The fields of one submission as a mapping (a bulk submission's item): `submit()`'s
#: arguments.
ITEM_FIELDS = frozenset(
    {
        "admission_key",
        "on_full",
        "queue",
        "spec",
        "priority",
        "rn",
        "not_before",
        "retry",
        "unique_key",
        "unique_window",
        "on_conflict",
        "locks",
        "limits",
        "order_key",
        "order_on_failure",
        "rate_key",
        "fair_key",
        "timeout",
        "expires_in",
        "expires_at",
        "batch",
        "notify",
        "parent",
        "traceparent",
    }
)


def task_values_from(
    item: Mapping[str, Any], defaults: SubmitDefaults | None = None
) -> dict[str, Any]:
    """`task_values()` from a mapping, rejecting unknown keys (as a bulk submission item)."""
    if not isinstance(item, Mapping):
        raise ValidationError("Each item must be an object.", code="invalid")
    unknown = set(item) - ITEM_FIELDS
    if unknown:
        raise ValidationError(
            {key: ValidationError("Unknown field.", code="unknown_field") for key in unknown}
        )
    missing = {"queue", "spec"} - set(item)
    if missing:
        raise ValidationError(
            {key: ValidationError("This field is required.", code="required") for key in missing}
        )
    on_conflict = on_conflict_of(item.get("on_conflict"))
    values = task_values(
        item["queue"],
        item["spec"],
        priority=item.get("priority"),
        rn=item.get("rn"),
        not_before=item.get("not_before"),
        retry=item.get("retry"),
        unique_key=item.get("unique_key"),
        unique_window=item.get("unique_window"),
        locks=item.get("locks"),
        limits=item.get("limits"),
        order_key=item.get("order_key"),
        order_on_failure=item.get("order_on_failure"),
        rate_key=item.get("rate_key"),
        fair_key=item.get("fair_key"),
        timeout=item.get("timeout"),
        expires_in=item.get("expires_in"),
        expires_at=item.get("expires_at"),
        batch=item.get("batch"),
        notify=item.get("notify"),
        parent=item.get("parent"),
        traceparent=item.get("traceparent"),
        defaults=defaults,
    )
    if "unique_key" in values:
        values["on_conflict"] = on_conflict
    if item.get("admission_key") is not None or item.get("on_full") is not None:
        from .admission import Admission
        from .queues import QUEUE_ON_FULL, validate_on_full

        on_full = item.get("on_full")
        try:
            if on_full is not None:
                validate_on_full(on_full, QUEUE_ON_FULL)
        except ValidationError as exc:
            raise ValidationError({"on_full": exc}) from None
        values["admission"] = Admission.of(admission_key=item.get("admission_key"), on_full=on_full)
    return values
