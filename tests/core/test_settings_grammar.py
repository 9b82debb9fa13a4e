"""Size and rate settings as a reader writes them: sizes with a unit ("1MB", "512KB", "1 MiB")
or in bytes, rates "100/m"; a bad one is one `scylla_django.E001` line of `check`, among the
others, never a traceback, and never a surprise at submit time."""

from __future__ import annotations

import io

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from scylla_django.checks import check_settings
from scylla_django.conf import scylla_settings
from scylla_django.models import Task
from scylla_django.text import SizeError, byte_size
from scylla_django.validation import validate_json


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (2048, 2048),
        ("2048", 2048),
        ("2048B", 2048),
        ("1MB", 1_000_000),
        ("1 MB", 1_000_000),
        ("512KB", 512_000),
        ("512kB", 512_000),
        ("1 MiB", 1024 * 1024),
        ("512KiB", 512 * 1024),
        ("1.5MB", 1_500_000),
        ("2GiB", 2 * 1024**3),
    ],
)
def test_a_size_is_bytes_or_a_number_with_a_unit(settings, value, size):
    assert byte_size(value) == size
    settings.SCYLLA = {"SPEC_SIZE_LIMIT": value, "TASK_LOG_MAX_BYTES": value}
    assert scylla_settings.SPEC_SIZE_LIMIT == size
    assert scylla_settings.TASK_LOG_MAX_BYTES == size
    assert check_settings() == []


@pytest.mark.parametrize("value", ["1 parsec", "MB", "1.5B", "", "1e6", True, 1.5, None, [1]])
def test_a_size_that_is_no_size_is_refused(value):
    with pytest.raises(SizeError):
        byte_size(value)


def test_a_size_setting_is_used_as_read(settings):
    settings.SCYLLA = {"SPEC_SIZE_LIMIT": "1KB"}
    validate_json({"text": "x" * 900})
    with pytest.raises(ValidationError, match="the limit is 1000") as exc:
        validate_json({"text": "x" * 1000})
    assert exc.value.code == "too_large"


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("SPEC_SIZE_LIMIT", "1 parsec", "a size in bytes or with a unit"),
        ("SPEC_SIZE_LIMIT", "1B", "at least 2 bytes"),
        ("TASK_LOG_MAX_BYTES", -1, "at least 0 bytes"),
    ],
)
def test_a_bad_size_is_one_error_that_says_what_a_size_is(settings, name, value, words):
    settings.SCYLLA = {name: value}
    with pytest.raises(ImproperlyConfigured, match=words):
        getattr(scylla_settings, name)
    [error] = check_settings()
    assert error.id == "scylla_django.E001"
    assert words in error.msg


@pytest.mark.django_db
def test_a_bad_size_limit_is_one_line_of_check_among_the_others(settings):
    """Validating a schedule measures its spec against `SPEC_SIZE_LIMIT`: a bad limit must not
    turn the schedules' check into a traceback that hides every other finding."""
    settings.SCYLLA = {
        "SPEC_SIZE_LIMIT": "a lot",
        "SCHEDULES": {"nightly": {"every": "5m", "queue": "q"}},
        "RATES": {"mail": "100/fortnight"},
        "LEASE_LENGTHS": 5,
    }
    with pytest.raises(SystemCheckError) as exc:
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    report = str(exc.value)
    assert report.count("scylla_django.E001") == 2
    assert "SCYLLA['SPEC_SIZE_LIMIT'] must be a size" in report
    assert "SCYLLA['RATES']['mail']" in report
    assert "scylla_django.W001" in report


@pytest.mark.django_db
@pytest.mark.keys
@pytest.mark.parametrize("rate", ["100/fortnight", "100", "0/m", "x/m", 100, "5/0s"])
def test_an_invalid_rate_is_reported_by_check(settings, rate):
    settings.SCYLLA = {"RATES": {"mail": rate, "sms": "5/10s"}}
    [error] = check_settings()
    assert error.id == "scylla_django.E001"
    assert error.msg.startswith("SCYLLA['RATES']['mail']: ")
    assert "100/m" in error.msg  # says what a rate looks like
    # At runtime it refuses only the submissions that name it, as a bad input.
    Task.objects.submit("default", 1, rate_key="sms")
    with pytest.raises(ValidationError) as refused:
        Task.objects.submit("default", 2, rate_key="mail")
    assert [e.code for e in refused.value.error_dict["rate_key"]] == ["invalid_rate"]


def test_valid_rates_pass_check(settings):
    settings.SCYLLA = {"RATES": {"mail": "100/m", "sms": "5/10s", "daily": "1000/d"}}
    assert scylla_settings.RATES == {"mail": "100/m", "sms": "5/10s", "daily": "1000/d"}
    assert check_settings() == []
