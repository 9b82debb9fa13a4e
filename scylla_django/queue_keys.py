"""The default keys of queues: per queue, the unique key, locks, limits, order key and rate of
a task submitted without them, each a value or a function of the spec, registered by
`@handler(queue, unique_key=..., locks=..., ...)` in the process that imports the handler and
applied by a submission that names none (docs/howto/keys.md and "Locks, limits and order
keys")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import ValidationError

from .validation import key_name, limit_names, order_block, validate_locks, validate_queue

#: The options a handler may give defaults for, in the order a submission takes them.
KEY_OPTIONS = ("unique_key", "locks", "limits", "order_key", "order_on_failure", "rate_key")

KeyFunction = Callable[[Any], Any]
_queue_keys: dict[str, dict[str, Any]] = {}


def check_defaults(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults given (None left out), each checked as far as it can be without a spec or
    a database: a function, or a value the submission would take (TypeError otherwise, at
    decoration). Limits and rates are looked up at submission (and by a system check)."""
    checked: dict[str, Any] = {}
    for option, value in defaults.items():
        if option not in KEY_OPTIONS:
            raise TypeError(f"Unknown key option {option!r}; one of {', '.join(KEY_OPTIONS)}.")
        if value is None:
            continue
        if option == "unique_key" and not callable(value):
            raise TypeError(f"unique_key must be a function of the spec, not {value!r}")
        if not callable(value):
            try:
                if option == "locks":
                    validate_locks(value)
                elif option == "limits":
                    limit_names(value)
                elif option == "order_on_failure":
                    order_block(value)
                else:
                    key_name(value, option)
            except ValidationError as exc:
                raise TypeError(f"{option}: {' '.join(exc.messages)}") from None
        checked[option] = value
    return checked


def register_keys(queue: str, **defaults: Any) -> None:
    """Make `defaults` (see `KEY_OPTIONS`) those of tasks submitted to `queue` without their
    own: what `@handler(queue, ...)` does, in the process that imports the handler. A call
    with none clears the queue's defaults."""
    queue = validate_queue(queue)
    checked = check_defaults(defaults)
    if checked:
        _queue_keys[queue] = checked
    else:
        _queue_keys.pop(queue, None)


def register_key(queue: str, key: KeyFunction | None) -> None:
    """Make `key(spec)` the unique key of tasks submitted to `queue` without one, keeping the
    queue's other defaults."""
    others = {k: v for k, v in _queue_keys.get(queue, {}).items() if k != "unique_key"}
    register_keys(queue, unique_key=key, **others)


def registered() -> dict[str, dict[str, Any]]:
    """The defaults of every queue that has some, by queue (for the system checks)."""
    return {queue: dict(defaults) for queue, defaults in _queue_keys.items()}


def default_keys(queue: str, spec: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    """The options the queue's defaults give `spec`, for those of `given` that are None.

    A function that fails is the submission's bad input: ValidationError naming the option,
    with the code `invalid_unique_key` (unique keys) or `invalid_key` (the other keys). An
    `order_on_failure` default applies only with an order key.
    """
    return resolve(_queue_keys.get(queue) or {}, spec, given, f"queue {queue!r}")


def resolve(
    defaults: Mapping[str, Any], spec: Any, given: Mapping[str, Any], owner: str
) -> dict[str, Any]:
    """The options `defaults` (checked by `check_defaults`) give `spec`, for those of `given`
    that are None; `owner` names whose defaults they are in an error (see `default_keys`)."""
    found: dict[str, Any] = {}
    errors: dict[str, ValidationError] = {}
    for option, value in defaults.items():
        if given.get(option) is not None:
            continue
        if callable(value):
            try:
                value = value(spec)
            except Exception as exc:  # the function belongs to the application
                code = "invalid_unique_key" if option == "unique_key" else "invalid_key"
                errors[option] = ValidationError(
                    f"The {option} function of {owner} failed: {exc!r}.", code=code
                )
                continue
        found[option] = value
    if errors:
        raise ValidationError(errors)
    if found.get("order_key") is None and given.get("order_key") is None:
        found.pop("order_on_failure", None)
    return found
