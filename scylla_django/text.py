"""Shared wording and the duration grammar: counts as people read them, and durations as they
are written in settings, calls, commands and schedules (`durations` words them back).

One function per rule, used by the settings, the validators, the commands, the monitor, the
admin and its dashboard alike. This module imports nothing else of the package.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Literal

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: The longest delay, timeout or window a task takes: about 31 years (longer is a mistake).
TIMEOUT_MAX = timedelta(seconds=10**9)
# A sign is read so that "-5" is refused for what it is (not positive), not as unreadable.
_DURATION = re.compile(r"\A\s*([+-]?\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*\Z")


class DurationError(ValueError):
    """Why a value is not a positive duration.

    `reason` is "type" (not a duration at all), "positive" (zero or negative), "short"
    (positive, but under `minimum`) or "range" (beyond `maximum`); each caller turns it into
    its own exception and message.
    """

    def __init__(
        self, reason: Literal["type", "positive", "short", "range"], value: object
    ) -> None:
        super().__init__(f"{value!r} is not a positive duration ({reason})")
        self.reason = reason
        self.value = value


def positive_duration(
    value: object, *, minimum: timedelta | None = None, maximum: timedelta | None = None
) -> timedelta:
    """A positive `timedelta` from a timedelta, a number of seconds or text, else DurationError.

    The one duration grammar of settings, Python calls, commands and schedules. Text is a
    number with an optional unit (`30`, `1.5s`, `500ms`, `5m`, `12h`, `7d`, `2w`; a bare
    number is seconds). A bool is not a number here.
    """
    seconds: float
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise DurationError("type", value)
        seconds = float(match[1]) * UNITS[match[2] or "s"]
    elif isinstance(value, bool):
        raise DurationError("type", value)
    elif isinstance(value, int | float):
        if not math.isfinite(value):
            raise DurationError("type", value)
        seconds = float(value)
    elif isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        raise DurationError("type", value)
    if seconds <= 0:
        raise DurationError("positive", value)
    if minimum is not None and seconds < minimum.total_seconds():
        raise DurationError("short", value)
    if maximum is not None and seconds > maximum.total_seconds():
        raise DurationError("range", value)
    if isinstance(value, timedelta):
        return value
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise DurationError("range", value) from None


def plural(count: int, noun: str) -> str:
    """`count` and `noun`, plural when needed: "1 task", "2 tasks", "1,200 tasks"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
