"""Shared wording and the duration rule: counts, durations and ages as people read them.

One function per rule, used by the settings, the validators, the commands, the monitor, the
admin and its dashboard alike. This module imports nothing else of the package.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Literal

from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
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


def format_duration(value: timedelta) -> str:
    """`value` for people: "10 days", "12 hours", "90 seconds", "1.5 seconds"."""
    total = value.total_seconds()
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if total >= size and total % size == 0:
            return plural(int(total // size), unit)
    if total == int(total):
        return plural(int(total), "second")
    return f"{total:g} seconds"


def span(since: datetime, now: datetime | None = None, depth: int = 2) -> str:
    """The time between `since` and now in words: "45 s", "2 hours, 12 minutes"."""
    now = now or timezone.now()
    seconds = (now - since).total_seconds()
    if abs(seconds) < 60:  # leases last seconds: "0 minutes" would say nothing
        return f"{abs(seconds):.0f} s"
    if seconds > 0:
        return timesince(since, now, depth=depth)
    return timeuntil(since, now, depth=depth)


def age(value: datetime, now: datetime | None = None) -> str:
    """How long ago (or from now) `value` is, compactly: "12 s ago", "3 min ago", "in 2 h"."""
    now = now or timezone.now()
    seconds = (now - value).total_seconds()
    magnitude = int(abs(seconds))
    words = f"{magnitude} s"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if magnitude >= size:
            words = f"{magnitude // size} {unit}"
            break
    return f"{words} ago" if seconds >= 0 else f"in {words}"
