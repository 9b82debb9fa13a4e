"""Shared wording and the grammars of values as people write them: counts as people read them;
durations as they are written in settings, calls, commands and schedules (`durations` words
them back); sizes in bytes ("1MB", "512KiB"); rates ("100/m").

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


#: Bytes per unit of a size: SI (powers of 1000) and IEC (powers of 1024), case aside.
SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_SIZE = re.compile(r"\A\s*([+-]?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*\Z")


class SizeError(ValueError):
    """A value that is not a size: neither a whole number of bytes nor a number with a unit."""

    def __init__(self, value: object) -> None:
        super().__init__(
            f"{value!r} is not a size: bytes (2048), or a number and a unit "
            '("512KB", "1MB", "1 MiB")'
        )
        self.value = value


def byte_size(value: object) -> int:
    """A number of bytes from an int or text, else SizeError.

    The one size grammar of settings: a whole number of bytes, or a number with a unit, SI
    (`kB`/`KB` 1000, `MB`, `GB`) or IEC (`KiB` 1024, `MiB`, `GiB`), in any case and with or
    without a space: `2048`, `"512KB"`, `"1.5MB"`, `"1 MiB"`. The result must be whole
    bytes; its sign is the caller's to judge. A bool is not a number here.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str) or not (match := _SIZE.match(value)):
        raise SizeError(value)
    unit = SIZE_UNITS.get(match[2].lower())
    if unit is None:
        raise SizeError(value)
    whole, _, fraction = match[1].partition(".")
    # Exact arithmetic: "1.5MB" is 1500000 bytes, "1.5B" no whole number of bytes.
    numerator: int = int(whole + fraction) * unit
    denominator: int = 10 ** len(fraction)
    if numerator % denominator:
        raise SizeError(value)
    return numerator // denominator


#: The units of a rate's period: "100/m", "5/10s".
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


#: A rate as text: a count, "/", and a period (a unit with an optional number before it), each
#: number 1 to 999999999 without leading zeros (so that the count fits its column).
RATE_PATTERN = r"^([1-9][0-9]{0,8})/([1-9][0-9]{0,8})?([smhd])$"


class RateError(ValueError):
    """A value that is not a rate ("<count>/<period>")."""

    def __init__(self, value: object) -> None:
        super().__init__(
            f'A rate is "<count>/<period>" such as "100/m" or "5/10s" (each number 1 to '
            f"999999999), not {value!r}."
        )
        self.value = value


def rate_parts(value: object) -> tuple[int, float]:
    """`(count, seconds)` of a rate written "<count>/<period>", the period a unit (s, m, h, d)
    with an optional whole number before it ("100/m", "5/10s"), each number 1 to 999999999;
    else RateError."""
    match = re.fullmatch(RATE_PATTERN, value) if isinstance(value, str) else None
    if match is None:
        raise RateError(value)
    count, number, unit = match.groups()
    return int(count), int(number or "1") * RATE_UNITS[unit]


def plural(count: int, noun: str) -> str:
    """`count` and `noun`, plural when needed: "1 task", "2 tasks", "1,200 tasks"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
