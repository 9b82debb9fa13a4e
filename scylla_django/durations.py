"""Durations as people read them, one way everywhere: "971 ms", "3.3 s", "2 min 5 s", "365 d".

The admin, its dashboard and the API's health messages show every duration with `short()` and
every moment relative to now with `ago()`. This module imports nothing else of the package.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from itertools import pairwise

from django.utils import timezone

# From the largest unit down: a duration is written in its largest unit and the next one.
UNITS: tuple[tuple[str, int], ...] = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def short(value: timedelta | float) -> str:
    """`value` (a timedelta or seconds) in at most two units, the second left out when zero.

    Under a second in milliseconds ("971 ms"), under ten seconds to a tenth ("3.3 s", "3 s"),
    under a minute in seconds ("45 s"), then in two units rounded to the second one ("2 min
    5 s", "3 h 12 min", "2 d 4 h", "365 d"). A negative duration is signed; zero is "0 s".
    """
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a duration")
    if seconds < 0:
        return f"-{short(-seconds)}"
    if seconds == 0:
        return "0 s"
    if round(seconds * 1000) < 1000:
        return f"{round(seconds * 1000)} ms"
    if round(seconds, 1) < 10:
        return f"{round(seconds, 1):g} s"
    if round(seconds) < 60:
        return f"{round(seconds)} s"
    for (big, size), (small, step) in pairwise(UNITS):
        if round(seconds) >= size:
            count = round(seconds / step)
            if count * step >= _larger(size):
                return short(count * step)  # rounded up into the larger unit: "1 d", not "24 h"
            first, second = divmod(count, size // step)
            return f"{first} {big} {second} {small}" if second else f"{first} {big}"
    raise AssertionError("unreachable: a minute or more is in some unit")


def _larger(size: int) -> float:
    """The unit above `size` seconds (infinity above days)."""
    above = [s for _, s in UNITS if s > size]
    return min(above) if above else math.inf


def ago(moment: datetime, now: datetime | None = None) -> str:
    """How long ago `moment` was, or how far ahead it is: "971 ms ago", "in 2 min 5 s"."""
    seconds = ((now or timezone.now()) - moment).total_seconds()
    return f"{short(seconds)} ago" if seconds >= 0 else f"in {short(-seconds)}"
