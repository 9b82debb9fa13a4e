"""The one duration formatter of the admin, the dashboard and the health messages."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from scylla_django.durations import ago, short


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "0 s"),
        (0.0004, "0 ms"),
        (0.971, "971 ms"),
        (0.9996, "1 s"),
        (1, "1 s"),
        (3.0, "3 s"),
        (10 / 3, "3.3 s"),
        (9.96, "10 s"),
        (45.4, "45 s"),
        (59.6, "1 min"),
        (125, "2 min 5 s"),
        (3570, "59 min 30 s"),
        (3599.7, "1 h"),
        (11520, "3 h 12 min"),
        (86000, "23 h 53 min"),
        (86399, "1 d"),
        (187200, "2 d 4 h"),
        (365 * 86400, "365 d"),
        (-3.3, "-3.3 s"),
    ],
)
def test_short(seconds, expected):
    assert short(seconds) == expected
    assert short(timedelta(seconds=seconds)) == expected


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_short_refuses_what_is_no_duration(value):
    with pytest.raises(ValueError, match="not a duration"):
        short(value)


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (timedelta(seconds=-0.971), "971 ms ago"),
        (timedelta(0), "0 s ago"),
        (timedelta(minutes=-2, seconds=-5), "2 min 5 s ago"),
        (timedelta(days=-30), "30 d ago"),
        (timedelta(seconds=20), "in 20 s"),
        (timedelta(hours=2, minutes=1), "in 2 h 1 min"),
    ],
)
def test_ago(offset, expected):
    now = datetime(2026, 11, 25, 12, tzinfo=UTC)
    assert ago(now + offset, now) == expected
