"""Validation of everything a client or a worker hands the scheduler (docs/reference/task.md).

Each function raises `django.core.exceptions.ValidationError` with a `code`, and returns the
normalised value. Nothing is written before validation has passed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

from .conf import LEASE_MIN, scylla_settings
from .exceptions import error_record
from .exceptions import validate_delay as validate_delay  # the rule lives beside Snooze
from .text import TIMEOUT_MAX, DurationError, positive_duration

RN_MAX_LENGTH = 128
QUEUE_MAX_LENGTH = 100
JSON_MAX_DEPTH = 64

# Not "." or "..": clients normalise them away in a URL (/tasks/../ is /), so such a task could
# never be read or cancelled by its rn.
# The validators keep the pattern strings (a migration records them); the hot path matches the
# compiled patterns first.
_RN_PATTERN = r"\A(?!\.\.?\Z)[A-Za-z0-9._:-]{1,128}\Z"
_QUEUE_PATTERN = r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,99}\Z"
_RN = re.compile(_RN_PATTERN)
_QUEUE = re.compile(_QUEUE_PATTERN)
rn_validator = RegexValidator(
    _RN_PATTERN,
    "An rn is 1 to 128 characters of letters, digits, '.', '_', ':' and '-', and not '.' or '..'.",
    code="invalid_rn",
)
WORKER_PREFIX = "worker-"
_WORKER_NAME = re.compile(rf"\A{WORKER_PREFIX}([0-9]{{1,18}})\Z")


def worker_name_for(pk: int) -> str:
    """The name of the worker whose id is `pk`: `worker-<pk>`."""
    return f"{WORKER_PREFIX}{pk}"


def worker_id(name: object) -> int | None:
    """The id in a worker's name (`worker-<id>`), or None if `name` is not a worker name."""
    match = _WORKER_NAME.match(name) if isinstance(name, str) else None
    return int(match[1]) if match else None


queue_validator = RegexValidator(
    _QUEUE_PATTERN,
    "A queue name is 1 to 100 characters of letters, digits, '.', '_', ':' and '-', "
    "starting with a letter or a digit.",
    code="invalid_queue",
)
schedule_name_validator = RegexValidator(
    _QUEUE_PATTERN,
    "A schedule name is 1 to 100 characters of letters, digits, '.', '_', ':' and '-', "
    "starting with a letter or a digit.",
    code="invalid_schedule_name",
)
_NUL = re.compile("\x00")
# Compact JSON, as the databases store it (one encoder: building one per call costs more).
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def validate_rn(value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError("An rn must be a string.", code="invalid_rn")
    if _RN.search(value) is None:  # the pattern alone first: submit's hot path
        rn_validator(value)
    return value


def validate_queue(value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError("A queue name must be a string.", code="invalid_queue")
    if _QUEUE.search(value) is None:
        queue_validator(value)
    return value


#: A W3C traceparent (https://www.w3.org/TR/trace-context/): version 00, its only version.
TRACEPARENT_LENGTH = 55
_TRACEPARENT = re.compile(r"\A00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\Z")


def validate_traceparent(value: object) -> str:
    """A W3C `traceparent` of version 00: `00-<32 hex trace id>-<16 hex span id>-<2 hex
    flags>`, lower case, neither id all zeros (docs/howto/tracing.md)."""
    if not isinstance(value, str) or _TRACEPARENT.search(value) is None:
        raise ValidationError(
            "A traceparent is a W3C trace context of version 00: "
            "00-<32 hex digits>-<16 hex digits>-<2 hex digits>, lower case, ids not all zero.",
            code="invalid_traceparent",
        )
    return value


def validate_schedule_name(value: object) -> str:
    """A schedule's name: the characters of a queue name (it goes into its tasks' rns)."""
    if not isinstance(value, str):
        raise ValidationError("A schedule name must be a string.", code="invalid_schedule_name")
    schedule_name_validator(value)
    return value


def validate_queues(values: object) -> list[str]:
    """A non-empty list of queue names, deduplicated and in the given order."""
    if isinstance(values, str) or not isinstance(values, list | tuple | set | frozenset):
        raise ValidationError("Queues must be a list of queue names.", code="invalid_queue")
    queues = list(dict.fromkeys(validate_queue(q) for q in values))
    if not queues:
        raise ValidationError("At least one queue is required.", code="invalid_queue")
    return queues


def validate_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        raise ValidationError("Priority must be an integer from 0 to 255.", code="invalid_priority")
    return value


def validate_progress(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError("Progress must be a number from 0 to 1.", code="invalid_progress")
    progress = float(value)
    if not (math.isfinite(progress) and 0.0 <= progress <= 1.0):
        raise ValidationError("Progress must be a number from 0 to 1.", code="invalid_progress")
    return progress


def validate_timeout(value: object) -> timedelta:
    """A positive duration, from a timedelta, a number of seconds or text such as "30s"."""
    try:
        return positive_duration(value, maximum=TIMEOUT_MAX)
    except DurationError:
        raise ValidationError(
            "A timeout must be a positive duration.", code="invalid_timeout"
        ) from None


def validate_timeouts(value: Mapping[str, object] | None) -> dict[str, timedelta]:
    """Run-time limits by queue, each as `validate_timeout` reads it (a None: no limit, left
    out); None for `SCYLLA['TIMEOUTS']`."""
    if value is None:
        return scylla_settings.TIMEOUTS
    if not isinstance(value, Mapping):
        raise ValidationError(
            "Timeouts are a mapping of queues to durations.", code="invalid_timeout"
        )
    return {queue: validate_timeout(t) for queue, t in value.items() if t is not None}


def validate_lease_length(value: object) -> timedelta:
    """A lease length: a duration (as `validate_timeout` reads it) of at least `LEASE_MIN`."""
    length = validate_timeout(value)
    if length < LEASE_MIN:
        raise ValidationError(
            f"A lease must last at least {LEASE_MIN.total_seconds():g} second, not {value!r}.",
            code="invalid_timeout",
        )
    return length


#: The longest unique key (`Task.unique_key`).
UNIQUE_KEY_MAX_LENGTH = 200

#: What a submission does when the unique key it names is held (`Task.objects.submit`).
ON_CONFLICT = ("return", "raise", "replace")


def validate_unique_key(value: object) -> str | None:
    """A unique key: None, or a non-empty string of at most UNIQUE_KEY_MAX_LENGTH characters
    (no NUL)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value
        or len(value) > UNIQUE_KEY_MAX_LENGTH
        or "\x00" in value
    ):
        raise ValidationError(
            f"A unique key is a non-empty string of at most {UNIQUE_KEY_MAX_LENGTH} characters.",
            code="invalid_unique_key",
        )
    return value


def validate_unique_window(value: object) -> timedelta | None:
    """How long a finished task keeps its unique key: None, or a positive duration (a
    timedelta, a number of seconds or a duration string such as `"1h"`)."""
    if value is None:
        return None
    try:
        return positive_duration(value, maximum=TIMEOUT_MAX)
    except DurationError:
        raise ValidationError(
            "unique_window must be a positive duration.", code="invalid_unique_window"
        ) from None


def validate_on_conflict(value: object) -> str:
    """One of ON_CONFLICT."""
    if not isinstance(value, str) or value not in ON_CONFLICT:
        raise ValidationError(
            f"on_conflict is one of {', '.join(ON_CONFLICT)}.", code="invalid_on_conflict"
        )
    return value


def validate_limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise ValidationError(
            "A lease limit must be an integer from 1 to 10000.", code="invalid_limit"
        )
    return value


# Members of a JSON document that need no check: `type(member) in _PLAIN`.
_PLAIN = frozenset({int, bool, type(None)})


def _check_json(value: Any, what: str, depth: int = 0) -> None:
    """Reject what the databases cannot store as JSON: NUL characters, NaN, deep nesting.

    A plain dict or list has its plain members (strings, numbers, booleans, null) checked in
    its own loop, not by a call each; anything else, and a container with a member found
    wrong, goes through `_check_any`, which says what is wrong first.
    """
    kind = type(value)
    if depth >= JSON_MAX_DEPTH or (kind is not dict and kind is not list):
        _check_any(value, what, depth)
        return
    if kind is dict:
        if any(type(key) is not str or "\x00" in key for key in value):
            _check_any(value, what, depth)
            return
        members = value.values()
    else:
        members = value
    for item in members:
        member = type(item)
        if member is str:
            if "\x00" in item:
                _check_any(value, what, depth)
        elif member is float:
            if not math.isfinite(item):
                _check_any(value, what, depth)
        elif member not in _PLAIN:
            _check_json(item, what, depth + 1)


def _check_any(value: Any, what: str, depth: int) -> None:
    """`_check_json` for any value, one call per member."""
    if depth > JSON_MAX_DEPTH:
        raise ValidationError(
            f"{what} is nested deeper than {JSON_MAX_DEPTH} levels.", code="invalid_json"
        )
    if isinstance(value, str):
        if _NUL.search(value):
            raise ValidationError(f"{what} contains a NUL character.", code="invalid_json")
    elif isinstance(value, bool) or value is None or isinstance(value, int):
        return
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"{what} contains NaN or infinity.", code="invalid_json")
    elif isinstance(value, list | tuple):
        for item in value:
            _check_any(item, what, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(f"{what} has a non-string key.", code="invalid_json")
            _check_any(key, what, depth + 1)
            _check_any(item, what, depth + 1)
    else:
        raise ValidationError(
            f"{what} holds a {type(value).__name__}, which is not JSON.", code="invalid_json"
        )


def invalid_result(exc: ValidationError) -> dict[str, Any]:
    """The error `invalid_result` of a task whose handler returned what `validate_json` refused
    (not JSON, too deep, too large): its messages as words, not a list's repr."""
    return error_record("invalid_result", "; ".join(exc.messages)[:500])


def validate_json(
    value: Any, what: str = "spec", *, allow_null: bool = False, limit: int | None = None
) -> Any:
    """Any JSON document within the size limit: `limit` bytes, by default
    `SCYLLA['SPEC_SIZE_LIMIT']`; or, with `allow_null`, None (no document, so never too
    large)."""
    if value is None:
        if allow_null:
            return None  # no document: nothing to encode or measure (most results are None)
        raise ValidationError(f"{what} must not be null.", code="required")
    _check_json(value, what)
    try:
        encoded = _COMPACT_JSON.encode(value).encode()
    except (ValueError, TypeError) as exc:  # e.g. an int too long to print
        raise ValidationError(f"{what} is not valid JSON: {exc}", code="invalid_json") from exc
    if limit is None:
        limit = scylla_settings.SPEC_SIZE_LIMIT
    if len(encoded) > limit:
        raise ValidationError(
            f"{what} is {len(encoded)} bytes; the limit is {limit}.", code="too_large"
        )
    return value


def validate_errors(errors: object) -> list[dict[str, Any]]:
    """A non-empty list of `{"code": str, "args": object, "description": str}`.

    A bare dict is taken as a list of one. `args` defaults to `{}` and `description` to `""`.
    """
    if isinstance(errors, dict):
        errors = [errors]
    if not isinstance(errors, list | tuple) or not errors:
        raise ValidationError("An abort needs at least one error.", code="invalid_errors")
    cleaned = []
    for error in errors:
        if not isinstance(error, dict):
            raise ValidationError(
                'Each error is an object {"code", "args", "description"}.', code="invalid_errors"
            )
        unknown = set(error) - {"code", "args", "description", "retry"}
        code = error.get("code")
        description = error.get("description", "")
        if unknown:
            raise ValidationError(
                f"Unknown error keys: {', '.join(sorted(unknown))}.", code="invalid_errors"
            )
        if not isinstance(code, str) or not code.strip() or len(code) > 200:
            raise ValidationError(
                "Each error needs a non-empty code (at most 200 characters).", code="invalid_errors"
            )
        if not isinstance(description, str):
            raise ValidationError("An error's description must be a string.", code="invalid_errors")
        entry = error_record(code, description, error.get("args"))
        if "retry" in error:  # the error asks for a retry itself (scylla_django.retries)
            if not isinstance(error["retry"], bool):
                raise ValidationError("An error's retry must be a boolean.", code="invalid_errors")
            entry["retry"] = error["retry"]
        cleaned.append(entry)
    validate_json(cleaned, "errors")
    return cleaned


class FieldErrors(dict[str, ValidationError]):
    """A ValidationError per field, collected so that one error can name every bad field."""

    def check(self, name: str, validator: Callable[[Any], Any], value: Any) -> Any:
        """`validator(value)`, or None with its ValidationError recorded under `name`."""
        try:
            return validator(value)
        except ValidationError as exc:
            self[name] = exc
            return None

    def raise_any(self) -> None:
        """Raise one ValidationError naming every recorded field, if there is any."""
        if self:
            raise ValidationError(dict(self))


# -- the names of keys (locks, limits, order keys, rates) ---------------------------------

#: The longest name of a lock or a limit.
KEY_NAME_MAX_LENGTH = 200

#: The modes of a lock: "exclusive" (one holder) or "shared" (any number, no exclusive one).
LOCK_MODES = {"exclusive": "L:", "shared": "S:"}


def key_name(value: object, field: str) -> str:
    """A lock's or a limit's name: a non-empty string of at most KEY_NAME_MAX_LENGTH, without
    NUL characters (which PostgreSQL cannot store)."""
    if (
        not isinstance(value, str)
        or not value
        or len(value) > KEY_NAME_MAX_LENGTH
        or "\x00" in value
    ):
        raise ValidationError(
            f"A name in {field} is a non-empty string of at most {KEY_NAME_MAX_LENGTH} characters"
            " (no NUL).",
            code="invalid_key",
        )
    return value


def key_ref(value: object, field: str) -> str:
    """The key name of `value`: a name, or a member of a key family as `(family, member)`
    (`("tenant", 42)` is "tenant:42"), the member text or an integer."""
    if isinstance(value, (tuple, list)):
        if (
            len(value) != 2
            or isinstance(value[1], bool)
            or not isinstance(value[1], (str, int))
            or value[1] == ""
        ):
            raise ValidationError(
                f"A key family's member in {field} is (family, member), the member text or an "
                "integer.",
                code="invalid_key",
            )
        family = key_name(value[0], field)
        return key_name(f"{family}:{value[1]}", field)
    return key_name(value, field)


def validate_locks(locks: object) -> list[str]:
    """The key elements of `locks`: names (exclusive) or `(name, "shared"|"exclusive")`."""
    if isinstance(locks, str) or not isinstance(locks, Sequence):
        raise ValidationError("locks is a list of lock names.", code="invalid_key")
    elements: dict[str, str] = {}
    for lock in locks:
        mode = "exclusive"
        if isinstance(lock, (tuple, list)):
            if len(lock) != 2 or not isinstance(lock[1], str) or lock[1] not in LOCK_MODES:
                raise ValidationError(
                    'A lock is a name or (name, "exclusive" | "shared").', code="invalid_key"
                )
            lock, mode = lock
        name = key_name(lock, "locks")
        if elements.get(name, mode) != mode:
            raise ValidationError(
                f"Lock {name!r} is named both shared and exclusive.", code="invalid_key"
            )
        elements[name] = mode
    return [LOCK_MODES[mode] + name for name, mode in elements.items()]


def limit_names(limits: object) -> list[str]:
    """The names in `limits` (a list of names or key family members, `("tenant", 42)`),
    without repeats; not looked up."""
    if isinstance(limits, str) or not isinstance(limits, Sequence):
        raise ValidationError("limits is a list of limit names.", code="invalid_key")
    return list(dict.fromkeys(key_ref(name, "limits") for name in limits))


#: order_on_failure: whether an abort for good holds the order key (`order_block`).
ORDER_ON_FAILURE = {"block": True, "continue": False}


def order_block(order_on_failure: object) -> bool:
    """`order_block` of an `order_on_failure` ("block", the default, or "continue")."""
    failure = "block" if order_on_failure is None else order_on_failure
    if not isinstance(failure, str) or failure not in ORDER_ON_FAILURE:
        raise ValidationError('order_on_failure is "block" or "continue".', code="invalid_key")
    return ORDER_ON_FAILURE[failure]
