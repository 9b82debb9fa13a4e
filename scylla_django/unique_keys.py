"""The default unique keys of queues: a function of the spec per queue, registered by
`@handler(queue, unique_key=...)` in the process that imports the handler, and applied by a
submission that names no key (README, "Unique tasks")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError

from .validation import validate_queue, validate_unique_key

KeyFunction = Callable[[Any], str]
_queue_keys: dict[str, KeyFunction] = {}


def register_key(queue: str, key: KeyFunction | None) -> None:
    """Make `key(spec)` the unique key of tasks submitted to `queue` without one (what
    `@handler(queue, unique_key=...)` does, in the process that imports the handler)."""
    queue = validate_queue(queue)
    if key is None:
        _queue_keys.pop(queue, None)
    elif not callable(key):
        raise TypeError(f"unique_key must be a function of the spec, not {key!r}")
    else:
        _queue_keys[queue] = key


def default_key(queue: str, spec: Any) -> str | None:
    """The key the handler of `queue` gives `spec`, if it registered a key function.

    A function that fails, or returns no valid key, is the submission's bad input:
    ValidationError with the code `invalid_unique_key`.
    """
    function = _queue_keys.get(queue)
    if function is None:
        return None
    try:
        key = function(spec)
    except Exception as exc:  # the function belongs to the application
        raise ValidationError(
            f"The unique key function of queue {queue!r} failed: {exc!r}.",
            code="invalid_unique_key",
        ) from None
    return validate_unique_key(key)
