"""One duration grammar: a number of seconds or a number with a unit, in settings, Python calls
and command options; a lease lasts at least a second; a sign that is wrong is called wrong."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from scylla_django.conf import scylla_settings
from scylla_django.models import QueueSetting
from scylla_django.text import DurationError, positive_duration
from scylla_django.validation import validate_lease_length, validate_timeout


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (30, 30),
        (1.5, 1.5),
        ("30", 30),
        ("30s", 30),
        ("500ms", 0.5),
        ("5m", 300),
        ("2h", 7200),
        ("7d", 604800),
        ("2w", 1209600),
        (timedelta(minutes=1), 60),
    ],
)
def test_numbers_and_text_with_units_are_one_grammar(value, seconds):
    assert positive_duration(value) == timedelta(seconds=seconds)
    assert validate_timeout(value) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("value", "reason"),
    [("-5", "positive"), (-5, "positive"), ("0s", "positive"), ("soon", "type"), (True, "type")],
)
def test_why_a_value_is_not_a_duration(value, reason):
    with pytest.raises(DurationError) as exc:
        positive_duration(value)
    assert exc.value.reason == reason


def test_settings_take_text_durations(settings):
    settings.SCYLLA = {"LEASE_LENGTH": "30s", "RETENTION": "7d"}
    assert scylla_settings.LEASE_LENGTH == timedelta(seconds=30)
    assert scylla_settings.RETENTION == timedelta(days=7)


@pytest.mark.parametrize("short", [0.5, "500ms", timedelta(milliseconds=999)])
def test_a_lease_shorter_than_a_second_is_refused(settings, short):
    settings.SCYLLA = {"LEASE_LENGTH": short}
    with pytest.raises(ImproperlyConfigured, match="must be at least 1 s"):
        _ = scylla_settings.LEASE_LENGTH
    with pytest.raises(ValidationError, match="A lease must last at least 1 second") as exc:
        validate_lease_length(short)
    assert exc.value.code == "invalid_timeout"
    assert validate_lease_length("1s") == timedelta(seconds=1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-5", "'-5' must be positive"),
        ("0", "'0' must be positive"),
        ("0.5", "'0.5' is too short: the least is 1 s"),
        ("200ms", "'200ms' is too short"),
        ("soon", "'soon' is not a duration"),
    ],
)
def test_the_worker_says_what_is_wrong_with_a_lease_length(db, value, message):
    with pytest.raises(CommandError, match=message):
        call_command("scylla_worker", "--queue", "t-echo", "--lease-length", value, "--once")


def test_a_queue_limit_of_zero_says_to_pause_instead(db):
    with pytest.raises(CommandError, match="scylla_queue pause emails"):
        call_command("scylla_queue", "limit", "emails", "0", stdout=io.StringIO())
    assert not QueueSetting.objects.filter(queue="emails").exists()
    with pytest.raises(CommandError, match="'-1' must be 0 or more"):
        call_command("scylla_queue", "limit", "emails", "-1", stdout=io.StringIO())
